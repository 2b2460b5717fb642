# Ref: seed 004 (US11487593 family): completion bit vector (fig. 1), notify and forward
#      (figs. 8, 9), root decision by mode (fig. 10), forced abort (fig. 11), registers (fig. 12).
"""Transaction-level model of the barrier units of a cluster, for the model backend.

The gateware (:class:`nicoll.hw.barrier.BarrierUnit`) runs one unit per node that talk
through notices; this model keeps the same per-node registers (the barrier block of the
register map) but moves notices with **zero latency**: a completion reaches every ancestor,
and a release or abort reaches every node, in the cycle it happens.  Everything else follows
the unit: the root decides by mode, an early release aborts exactly the unfinished nodes
with the root's ESTIMATE and writes the abort log, stamps s / mt / e are cycles of the shared
clock, a done carrying another barrier's number is dropped and counted in STALE, and the
local configuration checks raise the same ERRORS bits.

Time is a :class:`ModelClock` shared by every node of a cluster: each bus transaction
advances it, and the model runs the events due in between (timed dones armed through
DONE_AT, time-threshold releases) at their exact cycles.  Stamps are kept at the root only;
other nodes read them as 0.
"""

from dataclasses import dataclass, field

from nicoll.hw.barrier import DEFAULT_LOG_DEPTH
from nicoll.hw.core import DEFAULT_BARRIER_CHILDREN
from nicoll.hw.net.packet import PacketKind

from ..driver.barrier import ERROR_NAMES
from ..errors import NicollError

__all__ = ["ModelClock", "BarrierNetworkModel", "BARRIER_CHILDREN", "BARRIER_LOG_DEPTH"]

#: Child slots and abort-log entries the model reports in CAPS: the gateware's defaults, as
#: NicCore builds its barrier unit.
BARRIER_CHILDREN = DEFAULT_BARRIER_CHILDREN
BARRIER_LOG_DEPTH = DEFAULT_LOG_DEPTH
_SEQ_MASK = 0xFFFF
_TIME_MASK = (1 << 64) - 1



class ModelClock:
    """The cycle counter every node of a model cluster shares."""

    def __init__(self):
        self.now = 0
        self._listeners = []

    def listen(self, callback):
        """Call ``callback(target)`` before the clock moves to ``target``."""
        self._listeners.append(callback)

    def advance(self, cycles):
        target = self.now + cycles
        for callback in self._listeners:
            callback(target)
        self.now = target


@dataclass
class _NodeState:
    seq: int = 0
    vector: set = field(default_factory=set)    # ids completed in this subtree
    released: bool = False
    released_at: int = 0
    aborted: bool = False
    abort_seq: int = 0
    abort_estimate: int = 0
    stale: int = 0
    armed: bool = False
    armed_seq: int = 0
    route: dict = field(default_factory=dict)   # node id -> slot + 1
    write_error: bool = False
    outside: bool = False       # sticky until start, like the unit's
    notice: bool = False
    # the root's stamps of the current barrier, and of the last released one
    cur: dict = field(default_factory=dict)     # "s"/"mt"/"e" -> cycle
    stamps: dict = field(default_factory=dict)
    stamp_seq: int = 0
    release_ones: int = 0
    log: list = field(default_factory=list)     # (seq, frozenset of ids), oldest first
    log_count: int = 0

    def start(self, seq):
        """start_ac_region: everything but the route table (and its write error) reset;
        the sticky notice errors are cleared."""
        keep = (self.route, self.write_error)
        self.__init__(seq=seq)
        self.route, self.write_error = keep


class BarrierNetworkModel:
    """The barrier units of ``len(nodes)`` model nodes joined by a zero-latency network.

    :param clock: the cluster's :class:`ModelClock`.
    :param max_nodes: width of the bit vector (ids ``0 .. max_nodes - 1``).
    :param links: a :class:`~nicoll.model.faults.ModelLinks` whose faults each notice meets
        (a completion on every hop up the tree, a release on every hop down), or None.  A
        lost completion is never counted above the hop that lost it; a lost release leaves
        the child's subtree in the barrier.
    """

    def __init__(self, clock, max_nodes, *, children=BARRIER_CHILDREN,
                 log_depth=BARRIER_LOG_DEPTH, links=None):
        self.clock = clock
        self._links = links
        self.max_nodes = max_nodes
        self.children = children
        self.log_depth = log_depth
        self._nodes = {}        # node id -> ModelNode
        self._state = {}        # node id -> _NodeState
        self._roots = None      # node ids without a parent, kept until PARENT is written
        clock.listen(self._run_until)

    # -- attaching nodes ------------------------------------------------------------------

    def attach(self, node, node_id):
        """Give ``node`` (a :class:`~nicoll.model.node.ModelNode`) its barrier block."""
        if node_id in self._nodes:
            raise NicollError(f"node id {node_id} is attached to the barrier model twice")
        self._nodes[node_id] = node
        self._state[node_id] = state = _NodeState()
        node.on_write("barrier", "ROUTE", lambda: self._route_write(node_id))
        node.on_write("barrier", "CONTROL", lambda: self._control_write(node_id))
        node.on_write("barrier", "PARENT", self._forget_roots)
        self._roots = None
        errors = lambda: self.errors(node_id)       # noqa: E731
        stamp = lambda name: lambda: (state.stamps.get(name, 0)       # noqa: E731
                                      if self._is_root(node_id) else 0)
        values = {
            ("CAPS", "children"): lambda: self.children,
            ("CAPS", "log_depth"): lambda: self.log_depth,
            ("ROUTE_READ", "slot"): lambda: state.route.get(self._field(node_id, "ROUTE", "node"), 0),
            ("STATUS", "seq"): lambda: state.seq,
            ("STATUS", "finished"): lambda: int(node_id in state.vector),
            ("STATUS", "released"): lambda: int(state.released),
            ("STATUS", "aborted"): lambda: int(state.aborted),
            ("STATUS", "error"): lambda: int(any(errors().values())),
            ("STATUS", "armed"): lambda: int(state.armed),
            ("STATUS", "s_valid"): lambda: int("s" in state.stamps and self._is_root(node_id)),
            ("STATUS", "mt_valid"): lambda: int("mt" in state.stamps and self._is_root(node_id)),
            ("STATUS", "e_valid"): lambda: int("e" in state.stamps and self._is_root(node_id)),
            ("STATUS", "log_overflow"): lambda: int(state.log_count > self.log_depth),
            ("NUMBERS", "abort_seq"): lambda: state.abort_seq,
            ("NUMBERS", "stamp_seq"): lambda: state.stamp_seq,
            ("COUNT", "ones"): lambda: len(state.vector),
            ("COUNT", "total"): lambda: self._total(node_id),
            ("RELEASE_ONES", "ones"): lambda: state.release_ones,
            ("STALE", "count"): lambda: state.stale & 0xFFFF_FFFF,
            ("RELEASED_AT", "cycle"): lambda: state.released_at,
            ("S", "cycle"): stamp("s"),
            ("MT", "cycle"): stamp("mt"),
            ("E", "cycle"): stamp("e"),
            ("ABORT_ESTIMATE", "value"): lambda: state.abort_estimate,
            ("LOG_ENTRY", "seq"): lambda: self._log_entry(node_id)[0],
            ("LOG_ENTRY", "count"): lambda: min(state.log_count, 0xFFFF),
            ("LOG_IDS", "ids"): lambda: self._word(self._log_entry(node_id)[1], node_id),
            ("VECTOR", "bits"): lambda: self._word(state.vector, node_id),
        }
        for name in ERROR_NAMES:
            values["ERRORS", name] = lambda name=name: int(errors()[name])
        for (register, field_name), source in values.items():
            node.drive("barrier", register, field_name, source)

    # -- register views -------------------------------------------------------------------

    def _field(self, node_id, register, field_name):
        return self._nodes[node_id].field("barrier", register, field_name)

    def _parent(self, node_id):
        if self._field(node_id, "PARENT", "valid"):
            return self._field(node_id, "PARENT", "id")
        return None

    def _child_slots(self, node_id):
        """``{slot: child id}`` of the valid slots this build has."""
        return {j: self._field(node_id, f"CHILD{j}", "id") for j in range(self.children)
                if self._field(node_id, f"CHILD{j}", "valid")}

    def _is_root(self, node_id):
        return self._parent(node_id) is None

    def _total(self, node_id):
        slots = self._child_slots(node_id)
        routes = self._state[node_id].route
        return 1 + sum(1 for slot in routes.values() if slot - 1 in slots)

    def _word(self, ids, node_id):
        word = self._field(node_id, "SELECT", "word")
        return sum(1 << (i - 32 * word) for i in ids if 32 * word <= i < 32 * word + 32)

    def _log_entry(self, node_id):
        state = self._state[node_id]
        entry = self._field(node_id, "SELECT", "entry") % self.log_depth
        # Entry k holds the k-th early release since start, modulo the depth: the newest
        # release of that index has overwritten the older ones.
        found = (0, frozenset())
        for index, item in enumerate(state.log):
            if index % self.log_depth == entry:
                found = item
        return found

    def errors(self, node_id):
        """The ERRORS bits of node ``node_id``, by name."""
        state = self._state[node_id]
        n = self.max_nodes
        slots = self._child_slots(node_id)
        parent = self._parent(node_id)
        route = state.route
        out = dict.fromkeys(ERROR_NAMES, False)
        out["cfg_id"] = (node_id >= n or (parent is not None and parent >= n)
                         or any(c >= n for c in slots.values()))
        out["cfg_slot"] = any(slot - 1 not in slots for slot in route.values())
        out["cfg_self"] = (route.get(node_id, 0) != 0
                           or any(c == node_id for c in slots.values()))
        out["cfg_parent"] = parent is not None and (parent == node_id or route.get(parent, 0) != 0)
        ids = list(slots.values())
        out["cfg_dup"] = len(set(ids)) != len(ids)
        out["cfg_child"] = any(route.get(c, 0) != j + 1 for j, c in slots.items())
        out["cfg_write"] = state.write_error
        out["outside"] = state.outside
        out["notice"] = state.notice
        if parent is None:
            mode = self._field(node_id, "MODE", "mode")
            sub = self._field(node_id, "MODE", "sub")
            m = self._field(node_id, "M", "count")
            c = self._field(node_id, "C", "cycles")
            if mode == 1:
                out["mode"] = sub == 0
                out["m_range"] = bool(sub & 1) and not 1 <= m <= self._total(node_id)
                out["c_zero"] = bool(sub & 2) and c == 0
            else:
                out["mode"] = mode == 3
        return out

    def _cfg_ok(self, node_id):
        errors = self.errors(node_id)
        return not any(errors[name] for name in ERROR_NAMES if name.startswith("cfg_"))

    # -- register writes ------------------------------------------------------------------

    def _route_write(self, node_id):
        state = self._state[node_id]
        if self._field(node_id, "ROUTE", "clear"):
            state.route.clear()
            state.write_error = False
        elif self._field(node_id, "ROUTE", "write"):
            address = self._field(node_id, "ROUTE", "node")
            slot = self._field(node_id, "ROUTE", "slot")
            if address >= self.max_nodes or slot > self.children:
                state.write_error = True
            elif slot:
                state.route[address] = slot
            else:
                state.route.pop(address, None)

    def _control_write(self, node_id):
        state = self._state[node_id]
        seq = self._field(node_id, "CONTROL", "seq")
        now = self.clock.now
        self._run_until(now)
        if self._field(node_id, "CONTROL", "start"):
            state.start(seq)
        if self._field(node_id, "CONTROL", "done"):
            self._done(node_id, seq, now)
        if self._field(node_id, "CONTROL", "arm") and not self._field(node_id, "CONTROL", "start"):
            state.armed, state.armed_seq = True, seq

    # -- events ---------------------------------------------------------------------------

    def _run_until(self, target):
        """Run every event due at or before cycle ``target``, in time order."""
        while True:
            events = []
            for node_id, state in self._state.items():
                if state.armed:
                    at = self._field(node_id, "DONE_AT", "cycle")
                    events.append((max(at, self.clock.now), 1, node_id))
            root = self._root()
            deadline = self._deadline(root) if root is not None else None
            if deadline is not None:
                events.append((max(deadline, self.clock.now), 0, root))
            due = [e for e in events if e[0] <= target]
            if not due:
                return
            at, kind, node_id = min(due)
            if kind == 0:
                self._release(root, at)
            else:
                state = self._state[node_id]
                state.armed = False
                self._done(node_id, state.armed_seq, at)

    def _forget_roots(self):
        self._roots = None

    def _root(self):
        if self._roots is None:
            self._roots = [i for i in self._state if self._is_root(i)]
        return self._roots[0] if len(self._roots) == 1 else None

    def _params_ok(self, root):
        errors = self.errors(root)
        return not (errors["m_range"] or errors["c_zero"] or errors["mode"])

    def _deadline(self, root):
        """The cycle a time threshold releases the current barrier, or None."""
        state = self._state[root]
        if ("s" not in state.cur or self._field(root, "MODE", "mode") != 1
                or not self._field(root, "MODE", "sub") & 2
                or not self._params_ok(root) or not self._cfg_ok(root)):
            return None
        return state.cur["s"] + self._field(root, "C", "cycles")

    def _done(self, node_id, seq, now):
        state = self._state[node_id]
        if seq != state.seq or (state.aborted and state.abort_seq == seq):
            state.stale += 1
            return
        if node_id in state.vector or not self._cfg_ok(node_id):
            return
        state.released = False
        state.aborted = False
        # Zero latency: the completion reaches every ancestor now.  Each ancestor checks it as
        # the unit checks a COMPLETE notice: from one of its children, about a node routed
        # to that child's slot; otherwise it is dropped there with a sticky error.
        path, at = [node_id], self._parent(node_id)
        while at is not None and at in self._state and len(path) <= len(self._state):
            slots = {child: j for j, child in self._child_slots(at).items()}
            sender = path[-1]
            if self._links is not None and not self._links.deliver(sender, at,
                                                                   PacketKind.BARRIER):
                break           # the notice was lost: the ancestors above never count it
            if sender not in slots:
                self._state[at].notice = True
                break
            if self._state[at].route.get(node_id, 0) != slots[sender] + 1:
                self._state[at].outside = True
                break
            if not self._cfg_ok(at):
                break
            path.append(at)
            at = self._parent(at)
        for hop in path:
            self._state[hop].vector.add(node_id)
        root = path[-1]
        if self._is_root(root):
            self._count_at_root(root, now)

    def _count_at_root(self, root, now):
        state = self._state[root]
        ones, total = len(state.vector), self._total(root)
        m = self._field(root, "M", "count")
        if ones == 1:
            state.cur["s"] = now
        if m and ones == m:
            state.cur["mt"] = now
        if ones == total:
            state.cur["e"] = now
        mode, sub = self._field(root, "MODE", "mode"), self._field(root, "MODE", "sub")
        early = (mode == 1 and self._params_ok(root) and sub & 1 and ones >= m)
        if ones == total or early:
            self._release(root, now)

    def _release(self, root, now):
        """Release the current barrier of the tree under ``root`` at cycle ``now``."""
        state = self._state[root]
        seq = state.seq
        finished = set(state.vector)
        # The release travels down the child links, as the units forward it.
        members, pending = [], [root]
        while pending:
            node_id = pending.pop()
            if node_id in members or node_id not in self._state:
                continue
            members.append(node_id)
            # A release the network loses leaves that child's subtree in the barrier.
            pending.extend(child for child in self._child_slots(node_id).values()
                           if self._links is None
                           or self._links.deliver(node_id, child, PacketKind.BARRIER))
        unfinished = frozenset(i for i in members
                               if i not in finished and i not in self._state[i].vector)
        if unfinished:
            state.log.append((seq, unfinished))
            state.log_count += 1
        state.stamps = dict(state.cur)
        state.stamp_seq = seq
        state.release_ones = len(finished)
        state.cur = {}
        estimate = self._field(root, "ESTIMATE", "value")
        for node_id in members:
            node = self._state.get(node_id)
            if node is None:
                continue
            if node_id in unfinished:
                node.aborted, node.abort_seq, node.abort_estimate = True, seq, estimate
            node.seq = (seq + 1) & _SEQ_MASK
            node.vector = set()
            node.released, node.released_at = True, now & _TIME_MASK
