"""Faults on the simulated network (issue 22): what to inject, and what was injected.

``nicoll.Cluster(8, "verilator", faults=nicoll.Faults(drop=1e-3, seed=7))`` builds the
simulated cluster with a :class:`~nicoll.hw.sim.faulty_link.FaultyLink` on each direction of
every switch port: the sender's CRC, a fault injector and the receiver's CRC check.  The
rates are per packet and set at run time (:attr:`nicoll.Cluster.faults`), so one build serves
every rate and seed.  What each call injected is in ``cl.last.faults``
(:class:`FaultCounts`).  docs/faults.md says what nicoll promises under faults.

The configuration is packed with the gateware's own layout
(:func:`nicoll.hw.sim.faults.fault_config_layout`), the counters unpacked with
:func:`nicoll.hw.sim.faulty_link.link_counters_layout`.
"""

from dataclasses import dataclass, field
import math

from nicoll.hw.net.packet import PacketKind
from nicoll.hw.sim.faults import FaultAction, fault_config_layout
from nicoll.hw.sim.faulty_link import link_counters_layout

from .errors import NicollError

__all__ = ["Faults", "FaultTarget", "FaultCounts", "DIRECTIONS", "KINDS", "ACTIONS",
           "pack_config", "unpack_counters", "link_index", "difference"]

#: The two directions of a rank's link: into the switch, and out of it to the rank.
DIRECTIONS = ("to_switch", "from_switch")
#: Packet kinds a target may name (:class:`nicoll.hw.net.packet.PacketKind`, lower case).
KINDS = tuple(kind.name.lower() for kind in PacketKind)
#: What a target does to its packet.
ACTIONS = ("drop", "flip", "duplicate")

_RATES = ("drop", "flip", "duplicate", "delay")
_SCALE = 1 << 32


def _probability(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise NicollError(f"Faults({name}=...) must be a probability per packet (a number from "
                          f"0 to 1), not {value!r}")
    if not 0 <= value <= 1:
        raise NicollError(f"Faults({name}=...) must be between 0 and 1, not {value!r}")
    return float(value)


def _count(name, value, limit):
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
        raise NicollError(f"{name} must be an int from 0 to {limit - 1}, not {value!r}")
    return value


@dataclass(frozen=True)
class FaultTarget:
    """One packet to hit: the ``index``-th packet (from 0, counted from the moment the faults
    are set) of kind ``kind`` on rank ``rank``'s link in ``direction``, which gets ``action``.

    ``rank`` may be the repack node's id (``nodes``) on a cluster built with ``repack_node``.
    """
    rank: int
    kind: str = "data"
    index: int = 0
    action: str = "drop"
    direction: str = "to_switch"

    def __post_init__(self):
        # The link index (2 * rank + direction) is 8 bits in the injectors' configuration.
        _count("FaultTarget rank", self.rank, 128)
        if self.kind not in KINDS:
            raise NicollError(f"FaultTarget kind must be one of {', '.join(KINDS)}, "
                              f"not {self.kind!r}")
        _count("FaultTarget index", self.index, _SCALE)
        if self.action not in ACTIONS:
            raise NicollError(f"FaultTarget action must be one of {', '.join(ACTIONS)}, "
                              f"not {self.action!r}")
        if self.direction not in DIRECTIONS:
            raise NicollError(f"FaultTarget direction must be one of {', '.join(DIRECTIONS)}, "
                              f"not {self.direction!r}")


@dataclass(frozen=True)
class Faults:
    """Faults the simulated network injects, each a probability per packet and per link.

    :param drop: the packet is lost.
    :param flip: one bit of the packet's bytes (header or payload) is inverted; the CRC check
        at the end of the link then drops it (it is counted as ``fcs_bad``).
    :param duplicate: the packet arrives twice.
    :param delay: the packet waits ``delay_cycles`` cycles more on the link (and the packets
        behind it with it: a link keeps its order).
    :param seed: the seed of every link's generator (each link mixes in its own index): the
        same seed on the same sequence of calls injects the same faults.
    :param delay_cycles: how long a delayed packet waits.
    :param target: a :class:`FaultTarget`: one chosen packet, on top of the rates.
    """
    drop: float = 0.0
    flip: float = 0.0
    duplicate: float = 0.0
    delay: float = 0.0
    seed: int = 0
    delay_cycles: int = 256
    target: FaultTarget | None = None

    def __post_init__(self):
        for name in _RATES:
            object.__setattr__(self, name, _probability(name, getattr(self, name)))
        _count("Faults seed", self.seed, _SCALE)
        _count("Faults delay_cycles", self.delay_cycles, 1 << 16)
        if self.target is not None and not isinstance(self.target, FaultTarget):
            raise NicollError(f"Faults target must be a nicoll.FaultTarget or None, "
                              f"not {self.target!r}")

    @property
    def active(self):
        """Whether anything is injected at all."""
        return any(getattr(self, name) for name in _RATES) or self.target is not None


def link_index(rank, direction):
    """The gateware's index of rank ``rank``'s link in ``direction`` (``2 * port``, ``+ 1``
    out of the switch)."""
    return 2 * rank + DIRECTIONS.index(direction)


def pack_config(faults, epoch):
    """The bytes of ``faults`` as the injectors' configuration port, with ``epoch`` (a change
    of which restarts every generator from the seed and clears the counters)."""
    layout = fault_config_layout()
    values = {name: min(round(getattr(faults, name) * _SCALE), _SCALE - 1) for name in _RATES}
    values.update(delay_cycles=faults.delay_cycles, seed=faults.seed, epoch=epoch & 0xFF)
    target = faults.target
    if target is None:
        values.update(target_link=0, target_kind=0, target_index=0,
                      target_action=FaultAction.NONE.value)
    else:
        values.update(target_link=link_index(target.rank, target.direction),
                      target_kind=PacketKind[target.kind.upper()].value,
                      target_index=target.index,
                      target_action=FaultAction[target.action.upper()].value)
    word = 0
    for name, member in layout:
        word |= (int(values[name]) & ((1 << member.width) - 1)) << member.offset
    return word.to_bytes(-(-layout.size // 8), "little")


@dataclass(frozen=True)
class FaultCounts:
    """What the links injected and dropped during one call (``cl.last.faults``).

    Each figure sums every link; :attr:`links` has them per ``(rank, direction)`` for the
    links where anything was counted.  ``fcs_bad`` counts packets the CRC checks dropped
    (every flipped packet ends there), ``too_long`` packets longer than a check stores.
    """
    packets: int = 0
    dropped: int = 0
    flipped: int = 0
    duplicated: int = 0
    delayed: int = 0
    fcs_bad: int = 0
    too_long: int = 0
    links: dict = field(default_factory=dict)

    @property
    def injected(self):
        """Packets that met any fault."""
        return self.dropped + self.flipped + self.duplicated + self.delayed

    @property
    def lost(self):
        """Packets that did not arrive: dropped on the wire, or by a CRC check."""
        return self.dropped + self.fcs_bad + self.too_long

    def summary(self):
        """One line: what was injected, and on which links."""
        names = ("dropped", "flipped", "duplicated", "delayed", "fcs_bad", "too_long")
        text = ", ".join(f"{getattr(self, n)} {n}" for n in names if getattr(self, n))
        if not text:
            return f"no fault injected ({self.packets} packets on the links)"
        where = "; ".join(
            f"rank {rank} {direction}: " + ", ".join(f"{v} {n}" for n, v in counts.items()
                                                    if n != "packets" and v)
            for (rank, direction), counts in sorted(self.links.items()))
        return f"the network injected faults ({text} of {self.packets} packets; {where})"


def unpack_counters(raw, links=None):
    """The links' counters from the bytes of the counters port, as a list (link index order)
    of dicts; ``links`` defaults to as many as the bytes hold."""
    layout = link_counters_layout()
    if links is None:
        links = len(raw) * 8 // layout.size
    word = int.from_bytes(raw, "little")
    out = []
    for k in range(links):
        value = word >> (k * layout.size)
        out.append({name: value >> member.offset & ((1 << member.width) - 1)
                    for name, member in layout})
    return out


def difference(before, after):
    """The :class:`FaultCounts` between two readings (lists of per-link dicts); counters wrap
    at 32 bits."""
    totals = {name: 0 for name in link_counters_layout().members}
    links = {}
    for k, (a, b) in enumerate(zip(before, after)):
        delta = {name: (b[name] - a[name]) & 0xFFFF_FFFF for name in totals}
        for name, v in delta.items():
            totals[name] += v
        if any(v for n, v in delta.items() if n != "packets"):
            links[k // 2, DIRECTIONS[k % 2]] = delta
    return FaultCounts(**totals, links=links)
