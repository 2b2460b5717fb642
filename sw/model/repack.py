# Ref: seed 003 (CN111614581): repack units and their control tree; the device model's exchange.
"""The repack units of the device model: each node's repack block and the exchanges of its
control tree.

One :class:`RepackHubModel` is held by the :class:`~nicoll.model.engine.EngineNetworkModel` of
a model cluster and shares its nodes, engines and memories.  :meth:`~RepackHubModel.attach`
gives each node the repack block of the register map (the units on the nodes that have them,
none elsewhere); the rank lists and CONTROL.start configure a node's control tree.  An
aggregate command registers with the control tree of node ``send_to`` when its engine reaches
it (:meth:`~RepackHubModel.register`); the exchange runs at zero latency once every rank has
registered and waits at its aggregate command (:meth:`~RepackHubModel.try_exchange`), and its
counters follow the gateware's (registration + one packet per message sent; SEND, TAKEN,
DELIVERED, DONE and the message packets received).
"""

from dataclasses import dataclass, field

import numpy as np

from nicoll.hw.core import DEFAULT_REPACK_CAPACITY, DEFAULT_REPACK_MAX_GROUP, repack_max_ranks
from nicoll.hw.repack import MAX_RANKS as REPACK_MAX_RANKS, RepackError, buffer_bytes_needed
from nicoll.hw.net.packet import PacketKind
from nicoll.hw.repack.hub import DEFAULT_HUB_PACKET_BEATS

from ..driver.engine import _U32
from ..errors import NicollError
from ..plan.repack_message import pack_message, unpack_message

__all__ = ["RepackHubModel"]


@dataclass
class _Hub:
    """The repack block of one node: rank lists and the running exchange."""
    units: int
    src: dict = field(default_factory=dict)        # index -> (rank, end)
    dst: dict = field(default_factory=dict)
    busy: bool = False
    n: int = 0
    budget: int = 0
    registered: set = field(default_factory=set)
    src_groups: list = field(default_factory=list)
    dst_groups: list = field(default_factory=list)
    code: int = 0
    last_error: int = 0
    errors: int = 0
    ops: int = 0
    dropped: int = 0
    stuck: bool = False     # a packet of its exchange was lost (:mod:`.faults`)

    def fail(self, code):
        self.errors += 1
        self.last_error = code.value

    def finish(self, code, *, counted=False):
        if code != RepackError.OK and not counted:
            self.fail(code)
        self.busy, self.code = False, code.value
        self.ops += 1


class RepackHubModel:
    """The repack blocks of a model cluster's nodes and the exchanges of their control trees.

    :param nodes, engines, memory: the engine model's node id -> ModelNode, engine state and
        numpy view of the node's memory, shared with it.
    :param fail: the engine model's ``fail(node_id, name)``: sets ERRORS bit ``name`` and
        stops that engine.
    :param max_nodes: MAX_NODES of the build.
    :param repack_units: repack units of a node that has them (CAPS.units).
    :param repack_nodes: the node ids that have them; None for every node.
    :param links: a :class:`~nicoll.model.faults.ModelLinks` whose faults the exchange's
        packets meet, or None.  A lost registration, message, notice or result leaves the
        ranks that wait for it waiting, as in the gateware; the host's wait ends the call.
    """

    def __init__(self, *, nodes, engines, memory, fail, max_nodes, repack_units, repack_nodes,
                 links=None):
        self._links = links
        self._nodes = nodes
        self._engines = engines
        self._memory = memory
        self._fail = fail
        self.max_nodes = max_nodes
        self.repack_units = repack_units
        self.repack_nodes = None if repack_nodes is None else frozenset(repack_nodes)
        self._hubs = {}         # node id -> _Hub

    def attach(self, node, node_id):
        """The repack block of ``node``: its control tree, whose exchanges run at zero
        latency once every rank has registered."""
        has_units = self.repack_nodes is None or node_id in self.repack_nodes
        hub = self._hubs[node_id] = _Hub(units=self.repack_units if has_units else 0)
        node.on_write("repack", "CONTROL", lambda: self._control(node_id))
        has = bool(hub.units)
        values = {
            ("CAPS", "units"): lambda: hub.units,
            ("CAPS", "max_group"): lambda: DEFAULT_REPACK_MAX_GROUP * has,
            ("CAPACITY", "bytes"): lambda: DEFAULT_REPACK_CAPACITY * has,
            ("LIMITS", "max_ranks"): lambda: repack_max_ranks(self.max_nodes) * has,
            ("LIMITS", "packet_beats"): lambda: DEFAULT_HUB_PACKET_BEATS * has,
            ("STATUS", "busy"): lambda: int(hub.busy),
            ("STATUS", "pending"): lambda: 0,
            ("STATUS", "code"): lambda: hub.code,
            ("STATUS", "last_error"): lambda: hub.last_error,
            ("ERRORS", "count"): lambda: hub.errors & _U32,
            ("CYCLES", "count"): lambda: 0,
            ("OPS", "count"): lambda: hub.ops & _U32,
            ("DROPPED", "count"): lambda: hub.dropped & _U32,
        }
        for (register, field_name), source in values.items():
            node.drive("repack", register, field_name, source)

    def _control(self, node_id):
        node, hub = self._nodes[node_id], self._hubs[node_id]
        if not hub.units:
            return
        field = lambda register, name: node.field("repack", register, name)   # noqa: E731
        for which, lists in (("write_src", hub.src), ("write_dst", hub.dst)):
            if field("CONTROL", which) and not hub.busy:
                index = field("ORDER", "index")
                if index < REPACK_MAX_RANKS:
                    lists[index] = (field("ORDER", "rank"), field("CONTROL", "end"))
                else:
                    hub.fail(RepackError.BAD_CONFIG)
        if field("CONTROL", "start") and not hub.busy:
            self._start(node_id, field("N", "n"), field("BUDGET", "bytes"))

    def _start(self, node_id, n, budget):
        hub = self._hubs[node_id]
        max_ranks = repack_max_ranks(self.max_nodes)
        groups = []
        for lists in (hub.src, hub.dst):
            cut, group = [], []
            for index in range(n):
                rank, end = lists.get(index, (None, 0))
                group.append(rank)
                if end or index == n - 1:
                    cut.append(group)
                    group = []
            groups.append(cut)
        flat = [[r for g in cut for r in g] for cut in groups]
        if (not 1 <= n <= max_ranks or any(sorted(f) != list(range(n)) for f in flat)
                or any(len(g) > DEFAULT_REPACK_MAX_GROUP for cut in groups for g in cut)):
            hub.finish(RepackError.BAD_CONFIG)
            return
        dh = max(len(g) for g in groups[0])
        width = self._nodes[node_id].data_width
        if buffer_bytes_needed(budget, dh, width) > DEFAULT_REPACK_CAPACITY:
            hub.finish(RepackError.CAPACITY)
            return
        hub.busy, hub.n, hub.budget, hub.registered = True, n, budget, set()
        hub.src_groups, hub.dst_groups = groups

    def register(self, node_id, c):
        """An aggregate command's registration with the control tree on node ``send_to``."""
        e = self._engines[node_id]
        e.counts["PACKETS_SENT"] += 1
        if self._links is not None and not self._links.deliver(
                node_id, c["send_to"], PacketKind.REPACK_REGISTER):
            return
        hub = self._hubs.get(c["send_to"])
        if hub is None or not hub.busy:
            if hub is not None:
                hub.dropped += 1
            return
        if node_id >= hub.n:
            hub.fail(RepackError.OUTSIDE_GROUP)
        elif node_id in hub.registered:
            hub.fail(RepackError.DUPLICATE)
        else:
            hub.registered.add(node_id)

    def try_exchange(self, hub_id):
        """Run hub ``hub_id``'s exchange if every rank has registered and waits at it."""
        hub = self._hubs.get(hub_id)
        if hub is None or not hub.busy or len(hub.registered) != hub.n or hub.stuck:
            return False
        ranks = range(hub.n)
        commands = {}
        for r in ranks:
            e = self._engines.get(r)
            if e is None or not e.busy or not e.entered or not e.command["aggregate"]:
                return False
            commands[r] = e.command
        width = self._nodes[hub_id].data_width
        q, p = len(hub.dst_groups), len(hub.src_groups)
        for r, c in commands.items():
            if c["send_tag"] != q or c["recv_tag"] != p:
                self._fail(r, "protocol")
                hub.finish(RepackError.TIMEOUT)
                return True
        code = RepackError.OK
        links = self._links
        arrives = (lambda src, dst, kind, count=1:                          # noqa: E731
                   links is None or links.first_lost(src, dst, kind, count) is None)
        lost = False
        for a, group_s in enumerate(hub.src_groups):
            for b, group_d in enumerate(hub.dst_groups):
                tag = a << 8 | b
                blocks = {}
                for s in group_s:
                    c, e = commands[s], self._engines[s]
                    slot = c["send"]["offset"] + b * c["send"]["stride"]
                    memory = self._memory[s]
                    length = int.from_bytes(bytes(memory[slot:slot + 4]), "little")
                    beat = width // 8
                    if not 0 < length <= c["send"]["stride"] - beat:
                        self._fail(s, "region")
                        hub.finish(RepackError.TIMEOUT)
                        return True
                    raw = bytes(memory[slot + beat:slot + beat + length])
                    # The rank's message, and the unit's SEND and TAKEN notices to it.
                    lost |= not arrives(s, hub_id, PacketKind.REPACK_IN)
                    lost |= not arrives(hub_id, s, PacketKind.REPACK_NOTICE, 2)
                    e.counts["BYTES_SENT"] += length
                    e.counts["PACKETS_SENT"] += 1
                    e.counts["PACKETS_RECEIVED"] += 2           # SEND and TAKEN
                    try:
                        message = unpack_message(raw, width)
                    except NicollError:
                        message = None
                    if (message is None or message.rank != s or message.tag != tag
                            or len(message.blocks) != len(group_d)):
                        if code == RepackError.OK:
                            code = RepackError.LENGTH
                        hub.fail(RepackError.LENGTH)
                        blocks = None
                        break
                    blocks[s] = message.blocks
                if blocks is None:
                    continue
                for k, d in enumerate(group_d):
                    out = pack_message(d, tag, [blocks[s][k] for s in group_s], width)
                    c, e = commands[d], self._engines[d]
                    if len(out) > c["recv"]["stride"]:
                        self._fail(d, "length")
                        continue
                    at = c["recv"]["offset"] + a * c["recv"]["stride"]
                    self._memory[d][at:at + len(out)] = np.frombuffer(out, dtype=np.uint8)
                    beats = -(-len(out) // (width // 8))
                    # The DELIVERED notice and the result's packets.
                    lost |= not arrives(hub_id, d, PacketKind.REPACK_NOTICE)
                    lost |= not arrives(hub_id, d, PacketKind.REPACK_OUT,
                                        -(-beats // DEFAULT_HUB_PACKET_BEATS))
                    e.counts["BYTES_RECEIVED"] += len(out)
                    e.counts["PACKETS_RECEIVED"] += 1 + -(-beats // DEFAULT_HUB_PACKET_BEATS)
        if lost:
            # The exchange waits for what was lost, and every rank with it.
            hub.stuck = True
            return True
        for r in ranks:
            e = self._engines[r]
            if not arrives(hub_id, r, PacketKind.REPACK_NOTICE):
                continue                        # its DONE was lost: the rank waits
            e.counts["PACKETS_RECEIVED"] += 1                    # DONE
            if code == RepackError.OK and e.busy:
                e.sent = e.received = True
        hub.finish(code, counted=True)
        return True
