# Ref: seed 004 (US11487593 family): set_ac_parameter, start_ac_region, end_ac_region,
#      get_ac_value and the per-process "done" of the description; modes 0, 1, 2 (fig. 10).
"""Barrier block driver: one node's barrier unit, through its registers.

:class:`BarrierDriver` is the block layer between the register access layer
(:mod:`nicoll.driver.regs`) and :class:`~nicoll.Device`; the same code drives the device
model, the Amaranth simulation and Verilator.  The seed's host calls are its methods:

- :meth:`~BarrierDriver.set_ac_parameter` (m, c), :meth:`~BarrierDriver.set_estimate`;
- :meth:`~BarrierDriver.start_ac_region` (mode; clears vectors, counts, stamps and the log),
  :meth:`~BarrierDriver.end_ac_region`;
- :meth:`~BarrierDriver.done` (now, or at an exact cycle of the shared clock);
- :meth:`~BarrierDriver.get_ac_value` → (s, mt, e) of the last barrier the root released.

**Estimate**: the value an aborted node receives is written by the root's host
(:meth:`~BarrierDriver.set_estimate`), for instance a running mean of past results that the
application keeps; the unit carries it unchanged to every node it aborts.
"""

from dataclasses import dataclass

from nicoll.hw.regmap.generated import REGMAP
from ..errors import NicollError

__all__ = ["BarrierDriver", "BarrierStatus", "MODES", "SUB_MODES", "ERROR_NAMES"]

#: Decision modes by name (register MODE.mode).  Ref: seed 004, "mode 0 / 1 / 2".
MODES = {"normal": 0, "ac": 1, "collect": 2}
#: Sub-modes of mode "ac" by name (register MODE.sub: bit 0 count, bit 1 time).
SUB_MODES = {"count": 1, "time": 2, "both": 3}
#: The ERRORS bits, in register order, as the register map names them.
ERROR_NAMES = tuple(f.name for f in REGMAP.block("barrier").register("ERRORS").fields)
#: What each error bit means, for messages.
_ERROR_TEXT = {
    "m_range": "count threshold M is 0 or larger than the tree",
    "c_zero": "time threshold C is 0",
    "mode": "MODE names no mode (3, or mode 1 without a sub-mode)",
    "cfg_id": "a configured node id is not below MAX_NODES",
    "cfg_slot": "a route names a child slot that holds no child",
    "cfg_self": "the node itself is routed below it or is its own child",
    "cfg_parent": "the parent is the node itself or lies in its subtree",
    "cfg_dup": "one child id is in two slots",
    "cfg_child": "a child is not routed to its own slot",
    "cfg_write": "a route write named a node or slot out of range",
    "outside": "a completion came for a node outside the sending child's subtree",
    "notice": "a notice came that was not for this node or from neither parent nor child",
}
#: Cycles the unit's ERRORS bits may lag a register write: the write's pulse, the unit's
#: registered route write, the route table update, the two register stages of the subtree
#: total and the check of m against it (the configuration checks of m, c and mode: the
#: pulse, their input register and the check).
SETTLE_CYCLES = 7
_U16 = (1 << 16) - 1
_U64 = (1 << 64) - 1


def _int(name, value, low, high):
    if not isinstance(value, int) or isinstance(value, bool):
        raise NicollError(f"{name} must be an int, not {value!r}")
    if not low <= value <= high:
        raise NicollError(f"{name} must be between {low} and {high}, not {value!r}")
    return value


@dataclass(frozen=True)
class BarrierStatus:
    """One read of a node's STATUS and NUMBERS registers."""
    seq: int            # the barrier the node is in
    finished: bool      # its own completion counted in barrier `seq`
    released: bool      # it left barrier seq - 1
    aborted: bool       # an early release aborted it, in barrier `abort_seq`
    abort_seq: int
    error: bool
    armed: bool         # a timed done waits for its cycle


class BarrierDriver:
    """The barrier block of one node.

    :param regs: the node's :class:`~nicoll.driver.regs.Registers`.
    :param node_id: the node's id (its rank).
    :param max_nodes: the build's MAX_NODES.
    """

    def __init__(self, regs, *, node_id, max_nodes):
        self._regs = regs.barrier
        self._cycles = regs.global_.CYCLES
        self.node_id = node_id
        self.max_nodes = max_nodes
        caps = self._regs.CAPS.read_fields()
        self.children = caps["children"]
        self.log_depth = caps["log_depth"]

    # -- tree configuration ---------------------------------------------------------------

    def configure(self, parent, children, route):
        """Program this node's place in the tree.

        :param parent: the parent's id, or None at the root.
        :param children: child ids in slot order.
        :param route: ``{descendant id: child slot}`` for every node below this one.
        :raises NicollError: more children than the build has slots, an id out of range, or
            a configuration the unit reports wrong (its ERRORS bits, by name).
        """
        children = list(children)
        if len(children) > self.children:
            raise NicollError(f"node {self.node_id} has {len(children)} children, but this "
                              f"build's barrier unit has {self.children} child slots (CAPS)")
        for what, ids in (("parent", [] if parent is None else [parent]),
                          ("child", children), ("routed node", list(route))):
            for i in ids:
                _int(f"{what} id of node {self.node_id}", i, 0, self.max_nodes - 1)
        for node, slot in route.items():
            _int(f"route slot of node {node}", slot, 0, len(children) - 1)
        r = self._regs
        r.ROUTE.write_fields(clear=1)
        r.PARENT.write_fields(id=parent or 0, valid=int(parent is not None))
        for j in range(self.children):
            if j < len(children):
                r[f"CHILD{j}"].write_fields(id=children[j], valid=1)
            else:
                r[f"CHILD{j}"].write(0)
        for node, slot in sorted(route.items()):
            r.ROUTE.write_fields(node=node, slot=slot + 1, write=1)
        self.check(config_only=True)

    def route_entry(self, node):
        """The route table entry of ``node``: None if not below this node, else the slot."""
        _int("node", node, 0, self.max_nodes - 1)
        self._regs.ROUTE.write_fields(node=node)
        slot = self._regs.ROUTE_READ.slot.read()
        return None if slot == 0 else slot - 1

    # -- the seed's host calls ------------------------------------------------------------

    def set_ac_parameter(self, m, c):
        """Count threshold ``m`` (nodes) and time threshold ``c`` (cycles); used at the root.
        Whether they suit the mode is checked by the unit (:meth:`check`)."""
        self._regs.M.write(_int("m", m, 0, _U16))
        self._regs.C.write(_int("c", c, 0, _U64))

    def set_estimate(self, value):
        """The value the root sends to every node an early release aborts."""
        self._regs.ESTIMATE.write(_int("estimate", value, 0, _U64))

    def set_mode(self, mode, sub="count"):
        """Write MODE: ``mode`` in :data:`MODES`, ``sub`` in :data:`SUB_MODES` (mode "ac")."""
        if mode not in MODES:
            raise NicollError(f"barrier mode must be one of {', '.join(map(repr, MODES))}, "
                              f"not {mode!r}")
        if sub not in SUB_MODES:
            raise NicollError(f"AC sub-mode must be one of {', '.join(map(repr, SUB_MODES))}, "
                              f"not {sub!r}")
        self._regs.MODE.write_fields(mode=MODES[mode], sub=SUB_MODES[sub])

    def start_ac_region(self, mode, sub="count", *, seq=0):
        """Set the mode and start a region in barrier ``seq``: clears the bit vector, counts,
        stamps, stale count and abort log.  Every node of the tree must be started, with no
        barrier in flight, before barriers run."""
        self.set_mode(mode, sub)
        self._regs.CONTROL.write_fields(start=1, seq=_int("seq", seq, 0, _U16))

    def end_ac_region(self, mode="normal"):
        """Leave the region: later barriers decide by ``mode`` (normal by default)."""
        self.set_mode(mode)

    def done(self, seq=None, *, at=None):
        """This node finished barrier ``seq`` (default: the one it is in): now, or at cycle
        ``at`` of the shared clock (a timed done, armed until then)."""
        seq = self.status().seq if seq is None else _int("seq", seq, 0, _U16)
        if at is None:
            self._regs.CONTROL.write_fields(done=1, seq=seq)
        else:
            self._regs.DONE_AT.write(_int("at", at, 0, _U64))
            self._regs.CONTROL.write_fields(arm=1, seq=seq)

    def get_ac_value(self):
        """(s, mt, e) of the last barrier the root released: cycles of the first completion,
        of the m-th and of the last; None for a stamp the barrier did not reach."""
        status = self._regs.STATUS.read_fields()
        return tuple(self._regs[name].read() if status[f"{name.lower()}_valid"] else None
                     for name in ("S", "MT", "E"))

    # -- status ---------------------------------------------------------------------------

    def status(self):
        s = self._regs.STATUS.read_fields()
        numbers = self._regs.NUMBERS.read_fields()
        return BarrierStatus(seq=s["seq"], finished=bool(s["finished"]),
                             released=bool(s["released"]), aborted=bool(s["aborted"]),
                             abort_seq=numbers["abort_seq"], error=bool(s["error"]),
                             armed=bool(s["armed"]))

    def is_root(self):
        """Whether this node has no parent: the root, whose unit decides (seed 004)."""
        return not self._regs.PARENT.valid.read()

    def stamp_seq(self):
        """The barrier :meth:`get_ac_value` and :meth:`release_ones` belong to."""
        return self._regs.NUMBERS.stamp_seq.read()

    def release_ones(self):
        return self._regs.RELEASE_ONES.ones.read()

    def released_at(self):
        """The cycle this node last left a barrier."""
        return self._regs.RELEASED_AT.read()

    def abort_estimate(self):
        return self._regs.ABORT_ESTIMATE.read()

    def counts(self):
        """(ones, total): completions counted in this subtree, and its size."""
        c = self._regs.COUNT.read_fields()
        return c["ones"], c["total"]

    def stale(self):
        """Notices and dones dropped for carrying another barrier's number."""
        return self._regs.STALE.read()

    def vector(self):
        """Ids whose completion this node counted in the current barrier."""
        return self._read_ids(self._regs.VECTOR)

    def _read_ids(self, register, entry=0):
        ids = set()
        for word in range(-(-self.max_nodes // 32)):
            self._regs.SELECT.write_fields(entry=entry, word=word)
            bits = register.read()
            ids |= {32 * word + i for i in range(32) if bits >> i & 1}
        return ids

    def abort_log(self):
        """The root's abort log: ``(entries, overflow)`` with entries a list of
        ``(barrier seq, set of aborted ids)``, oldest first (at most ``log_depth``)."""
        count = self._regs.LOG_ENTRY.count.read()
        overflow = bool(self._regs.STATUS.log_overflow.read())
        entries = []
        for k in range(max(0, count - self.log_depth), count):
            entry = k % self.log_depth
            ids = self._read_ids(self._regs.LOG_IDS, entry)
            entries.append((self._regs.LOG_ENTRY.seq.read(), ids))
        return entries, overflow

    def abort_log_entry(self, seq):
        """The ids the root's log holds as aborted in barrier ``seq``, or None when the log
        holds no entry for it (the barrier was not released early, or ``log_depth`` later
        early releases have overwritten it).  Reads the entries newest first and stops at
        ``seq``'s, so a host that reads right after the release reads one entry."""
        _int("seq", seq, 0, _U16)
        count = self._regs.LOG_ENTRY.count.read()
        for k in reversed(range(max(0, count - self.log_depth), count)):
            entry = k % self.log_depth
            self._regs.SELECT.write_fields(entry=entry, word=0)
            if self._regs.LOG_ENTRY.seq.read() == seq:
                return self._read_ids(self._regs.LOG_IDS, entry)
        return None

    def errors(self):
        """The names of the ERRORS bits that are set."""
        bits = self._regs.ERRORS.read_fields()
        return [name for name in ERROR_NAMES if bits[name]]

    def check(self, *, config_only=False):
        """Raise :class:`NicollError` naming every ERRORS bit that is set (only the ``cfg_*``
        bits with ``config_only``), once the bits have caught up with earlier writes."""
        first = self.cycles()
        while self.cycles() < first + SETTLE_CYCLES:
            pass
        names = [n for n in self.errors() if not config_only or n.startswith("cfg_")]
        if names:
            detail = "; ".join(f"{n}: {_ERROR_TEXT[n]}" for n in names)
            raise NicollError(f"barrier unit of node {self.node_id} reports "
                              f"{', '.join(names)} ({detail})")

    def cycles(self):
        return self._cycles.read()
