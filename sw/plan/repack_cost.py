# Ref: seed 003 (CN111614581): repacking against direct pairwise exchange, the cost per rank.
"""The cost model of an all-to-all(-v) on the repack units (seed 003): :func:`cost_direct`,
:func:`cost_repack`, and :func:`direct_threshold`, the block size up to which repacking is
the better method.  :func:`nicoll.plan.repack.plan_subgroups` chooses dh and dv by it.

Cost model (cycles per rank; ``docs/repack.md`` derives it)
-----------------------------------------------------------
With ``α`` the cost of one message at a rank (posting it and handling its completion, in
cycles), beats of ``B = data_width // 8`` bytes moving one per cycle, ``E = data_width // 16``
length entries per table beat, blocks of ``a`` bytes, P source and Q destination subgroups,
``M = max(P, Q)``, ``d = max(dh, dv)`` and U units:

- direct pairwise exchange: ``T_direct = (N-1)·α + (N-1)·max(1, ⌈a/B⌉)`` (N-1 messages each
  way, sends and receives overlapping);
- repack, rank side: ``T_rank = M·α + 2·(M·(1 + ⌈d/E⌉) + ⌈N·a/B⌉)`` (M messages each way, each
  with a header and a length table; the bytes cross the network twice, to the unit and
  from it, and the unit stores and forwards);
- repack, unit side: ``T_unit = min(U, P·Q)·(3 + d + dh) + ⌈P·Q/U⌉·((dh+dv)·(1 + ⌈d/E⌉) +
  2·dh·dv·⌈a/B⌉)`` (the units are started one after the other, each start costing a scan
  step, the rank lists read, the configuration and dh SEND notices; then the busiest unit's
  beats in and out);
- repack, control tree: ``T_ctrl = P·Q·(3 + d + 2·dh + dv) + N`` (it assigns one sub-matrix
  at a time and sends one notice per cycle: per sub-matrix the start above plus dh TAKEN and
  dv DELIVERED notices; then N DONE notices);
- before all of it a setup of ``4·N + P·Q`` cycles (three passes over the rank lists, the
  pair table cleared, N registrations);
- ``T_repack = 4·N + P·Q + max(T_rank, T_unit, T_ctrl)``.

Direct exchange wins once ``T_direct <= T_repack``; :func:`direct_threshold` returns the block
size up to which repacking is strictly cheaper.

The network (``fabric``, a :class:`nicoll.Fabric` or a profile name, converted at
``clock_mhz``) adds, with ``x(b)`` what a message of b bytes costs beyond its beats
(:meth:`~nicoll.Fabric.message_extra_cycles`) and ``h`` one hop
(:meth:`~nicoll.Fabric.hop_cycles`):

- direct: per message ``x(a) + x(0) + 2·h`` (the engine's clear-to-send goes to the sender
  and the data comes back);
- rank side: ``Q·x(H + dv·a) + P·x(H + dh·a)`` with ``H = B·(1 + ⌈d/E⌉)`` the header and
  table bytes (Q messages out, P in);
- unit side: ``⌈P·Q/U⌉·(dh·x(H + dv·a) + dv·x(H + dh·a))``;
- control tree: ``(P·Q·(2·dh + dv) + N)·x(n_h)`` for its notices of ``n_h`` header bytes;
- and ``(2 + 2·⌈P·Q/U⌉)·h`` of hops (:func:`repack_hops`): each round of sub-matrices on
  the units pays two (the data to a unit, the data back), and the exchange two more (the
  registration, the DONE notice).  Measured on the Verilator cluster with one unit (nine
  configurations, docs/fabric.md): the fabric's part of an aggregate exchange is this
  within 16 %, seven of the nine within 6 %.

On the default ``"ideal"`` fabric every one of them is 0: the figures are the ones without a
fabric.
"""

import math

from nicoll.hw.net.packet import packet_header_layout
from nicoll.hw.repack import MAX_BLOCK_BYTES, table_beats

from ..errors import NicollError
from ..fabric import NOMINAL_MHZ, resolve_fabric
from .repack_checks import _check_data_width

__all__ = ["DEFAULT_ALPHA", "MEASURED_REPACK_CYCLES", "MEASURED_SWITCH_UNIT_CYCLES", "repack_hops",
           "cost_direct", "cost_repack", "direct_threshold", "cluster_repack_cycles",
           "repack_plan_cycles"]

#: Default per-message cost ``α`` in cycles: about 1 µs of host and NIC work per message at
#: 100 MHz, the order of an MPI small-message overhead.  Pass the figure of your system.
DEFAULT_ALPHA = 100


#: The simulated cluster's aggregate exchange (one unit behind node 0's port), fitted by least
#: squares to the nine "ideal" aggregate rows of the Verilator sweeps (tests/data/
#: alltoall_sweep.json; 23.2, 36.8 and 1.66 unrounded): cycles once per exchange, per
#: sub-matrix, and per beat a sub-matrix moves through the hub's port (its messages in and out
#: with their packet headers and length tables).  :func:`cluster_repack_cycles` uses them.
MEASURED_REPACK_CYCLES = (23, 37, 5 / 3)

#: Several units in the switch, each on a port of its own (the repack node), fitted to the
#: twelve 256-bit four-unit rows of tests/data/alltoall_repack_node.json: ``(g1, g2)``, the
#: cycles between the control tree's starts of the first sub-matrices (one a unit) and the
#: fewest cycles a sub-matrix takes the control tree when the units wait on it (many small
#: sub-matrices).  :func:`cluster_repack_cycles` uses them with ``units > 1``.
MEASURED_SWITCH_UNIT_CYCLES = (14, 33)


def repack_hops(p, q, units):
    """Hops on the way of a repacked exchange of ``p × q`` sub-matrices on ``units`` units: two
    per round of sub-matrices, two for the exchange (module docstring)."""
    return 2 + 2 * -(-(p * q) // units)


def _network(fabric, clock_mhz, width):
    """``(x, h)``: what a message of b bytes adds beyond its beats, and one hop, in cycles."""
    fabric = resolve_fabric(fabric)

    def extra(nbytes):
        return fabric.message_extra_cycles(nbytes, clock_mhz, width)
    return extra, fabric.hop_cycles(clock_mhz)


def cost_direct(n, block_bytes, data_width=64, alpha=DEFAULT_ALPHA, *, fabric=None,
                clock_mhz=NOMINAL_MHZ):
    """Cycles per rank of direct pairwise exchange (module docstring)."""
    width = _check_data_width(data_width)
    beat_bytes = width // 8
    extra, hop = _network(fabric, clock_mhz, width)
    network = extra(block_bytes) + extra(0) + 2 * hop
    return (n - 1) * alpha + (n - 1) * (max(1, -(-block_bytes // beat_bytes)) + network)


def cost_repack(n, block_bytes, dh, dv, data_width=64, units=1, alpha=DEFAULT_ALPHA, *,
                fabric=None, clock_mhz=NOMINAL_MHZ):
    """Cycles per rank of a repacked exchange with dh×dv sub-matrices (module docstring)."""
    width = _check_data_width(data_width)
    beat_bytes = width // 8
    extra, hop = _network(fabric, clock_mhz, width)
    p, q = -(-n // dh), -(-n // dv)
    most = max(p, q)
    head = 1 + table_beats(max(dh, dv), width)
    out_extra = extra(head * beat_bytes + dv * block_bytes)       # a message to a unit
    in_extra = extra(head * beat_bytes + dh * block_bytes)        # a message from a unit
    notice_extra = extra(-(-packet_header_layout().size // 8))
    rank_side = (most * alpha + 2 * (most * head + -(-n * block_bytes // beat_bytes))
                 + q * out_extra + p * in_extra)
    start = 3 + max(dh, dv) + dh
    unit_side = (min(units, p * q) * start + -(-(p * q) // units) *
                 ((dh + dv) * head + 2 * dh * dv * -(-block_bytes // beat_bytes)
                  + dh * out_extra + dv * in_extra))
    control = p * q * (start + dh + dv) + n + (p * q * (2 * dh + dv) + n) * notice_extra
    return 4 * n + p * q + max(rank_side, unit_side, control) + repack_hops(p, q, units) * hop


def direct_threshold(n, dh, dv, data_width=64, units=1, alpha=DEFAULT_ALPHA, *, fabric=None,
                     clock_mhz=NOMINAL_MHZ):
    """The block size (bytes) up to which repacking beats direct exchange: the largest ``a``
    such that ``cost_repack < cost_direct`` for every block size from 0 to ``a``; -1 if it
    does not even at 0.  Above it use direct pairwise exchange."""
    # Both costs step at beat boundaries, so the comparison can flip back and forth near the
    # crossing; the threshold is the end of the first run, found by walking up from 0.
    network = dict(fabric=resolve_fabric(fabric), clock_mhz=clock_mhz)
    a = 0
    while a <= MAX_BLOCK_BYTES and (cost_repack(n, a, dh, dv, data_width, units, alpha, **network)
                                    < cost_direct(n, a, data_width, alpha, **network)):
        a += 1
    return a - 1


def cluster_repack_cycles(n, block_bytes, dh, dv, data_width=64, *, fabric=None,
                          clock_mhz=NOMINAL_MHZ, units=1):
    """Cycles of an aggregate exchange on the simulated cluster (the slowest rank's, as
    ``nicoll bench`` reports them), calibrated: ``4·N + P·Q`` of setup (the model above), then
    :data:`MEASURED_REPACK_CYCLES` ``(c, s, k)``: ``c + R·(s + k·m)`` with ``R = ⌈P·Q/U⌉``
    rounds of sub-matrices on the ``units`` U and ``m`` the beats of one sub-matrix's
    messages through a unit's port (``dh`` in, each a packet header, a message header and
    length table, and ``dv`` blocks; ``dv`` out, each with ``dh`` blocks), plus
    :func:`repack_hops` hops of ``fabric`` at ``clock_mhz``.

    With one unit (``units=1``) it runs its sub-matrices one after another, each a round
    trip through the control tree, the source ranks and the unit: within 10 % of the 18
    measured one-unit rows (N = 8 and 16, 64 and 256 bits, 8 to 512-byte blocks, "ideal"
    and "roce100").  Several units count only where each has a switch port of its own
    (``Cluster(..., repack_node=True)``): the control tree starts the first ``min(P·Q, U)``
    sub-matrices ``g1`` cycles apart, and the exchange takes at least ``g2`` cycles a
    sub-matrix (:data:`MEASURED_SWITCH_UNIT_CYCLES`), so the rounds' figure becomes
    ``max((min(P·Q, U) - 1)·g1 + R·(s + k·m) + hops, P·Q·g2)``; within 10 % of the 18
    measured four-unit rows, the six at 64 bits out of the fit.  For units that share one
    port (node 0's) pass ``units=1``: their measured exchanges take 0.25 to 1.11 of that
    figure (docs/fabric.md), an upper estimate."""
    width = _check_data_width(data_width)
    if not isinstance(units, int) or isinstance(units, bool) or units < 1:
        raise NicollError(f"units must be a positive integer, not {units!r}")
    beat_bytes = width // 8
    _, hop = _network(fabric, clock_mhz, width)
    p, q = -(-n // dh), -(-n // dv)
    packet_header = -(-packet_header_layout().size // width)
    head = packet_header + 1 + table_beats(max(dh, dv), width)
    beats = (dh * (head + -(-(dv * block_bytes) // beat_bytes))
             + dv * (head + -(-(dh * block_bytes) // beat_bytes)))
    once, per_round, per_beat = MEASURED_REPACK_CYCLES
    stagger, floor = MEASURED_SWITCH_UNIT_CYCLES
    rounds = -(-(p * q) // units)
    unit_path = ((min(p * q, units) - 1) * stagger + rounds * (per_round + per_beat * beats)
                 + repack_hops(p, q, units) * hop)
    # With one unit the floor never binds (g2 < s), so the one-unit figure is unchanged.
    return math.ceil(4 * n + p * q + once + max(unit_path, p * q * floor))


def repack_plan_cycles(plan, *, fabric=None, clock_mhz=NOMINAL_MHZ, in_switch=False):
    """:func:`cluster_repack_cycles` of a :class:`~nicoll.plan.repack.RepackPlan`: its ranks,
    subgroup sizes and data width, at its mean block length rounded up; with ``in_switch``
    (the units each on a switch port of their own) on the plan's units, else on one."""
    return cluster_repack_cycles(plan.n, math.ceil(plan.block_bytes), plan.dh, plan.dv,
                                 plan.data_width, fabric=fabric, clock_mhz=clock_mhz,
                                 units=plan.units if in_switch else 1)
