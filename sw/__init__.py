"""nicoll: an open collective-offload engine for FPGA SmartNICs — the host side.

Layers, bottom up: a transport per node (:mod:`nicoll.transport`; one per backend), the
register access layer generated from the SystemRDL map (:mod:`nicoll.regs`), a
:class:`Device` per node with its block drivers (:mod:`nicoll.barrier`, :mod:`nicoll.engine`),
the collective compilers (:mod:`nicoll.schedule`), and a :class:`Cluster` of N nodes that
runs collectives and barriers.
"""

from .cluster import Cluster
from .config import BACKENDS, DATA_WIDTHS
from .device import Device
from .errors import NicollError

__all__ = ["Cluster", "Device", "NicollError", "BACKENDS", "DATA_WIDTHS"]
__version__ = "0.1.0"
