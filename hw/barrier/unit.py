# Ref: seed 004 (Fujitsu, US11487593 family; /work/shared/seeds/004_*.txt): completion bit
#      vector per node (fig. 1), notify/forward (figs. 8, 9), root decision by mode (fig. 10),
#      forced-abort forwarding (fig. 11), registers PR/MR/CR/CNT/SR/MR'/ER (fig. 12).
"""BarrierUnit: a tree barrier with a completion bit vector and approximate-computing
thresholds.

One unit sits in every node.  Nodes form a tree (any shape: binary, k-ary, chain) that the
host describes to each unit through its configuration ports: its own id, its parent, up to
``max_children`` children, and a route table saying, for every node id, which child's subtree
holds it.  The units talk only through *notices* (:data:`NOTICE_LAYOUT`), one flat struct each,
sent on ``tx`` and received on ``rx``:

- ``COMPLETE``: "node ``subject`` finished barrier ``seq``", sent up to the parent by the node
  that finished and forwarded up by every node on the way (figs. 8, 9).
- ``KILL``: "abort your unfinished processes of barrier ``seq``", with the ``estimate`` the
  root chose; sent down only toward children whose subtree still holds unfinished nodes
  (figs. 10, 11).
- ``RELEASE``: "barrier ``seq`` is over"; sent down to every child.  A node that takes it moves
  on to barrier ``seq + 1``.

Every node keeps the bit vector of its own subtree and counts its ones as bits newly set (one
increment per notice, never a re-count).  The root decides by ``mode``: ``NORMAL`` releases
when every node of the tree has completed; ``AC`` releases early when ones ≥ m (``COUNT``),
when now − s ≥ c (``TIME``) or either (``BOTH``), and then sends KILL toward the unfinished
nodes; ``COLLECT`` releases like ``NORMAL`` and records the stamps s (first completion), mt
(ones reached m) and e (all completed).  The root logs which node ids each early release
aborted, keyed by the barrier sequence number.

Design choices (see docs/barrier.md for the whole story):

- **Estimate**: the root's host writes ``estimate``; a KILL carries it unchanged down the
  tree and an aborted node shows it in ``abort_estimate``.  A running mean of past results
  belongs to the host (it knows what a "result" is); the unit only carries the number.
- **Sequence numbers**: ``start`` sets ``seq`` to ``start_seq`` (the driver passes 0 or the
  number it wants); each release adds one, modulo 2**16.  A notice or a ``done`` strobe whose
  seq is not the unit's current one is dropped and counted in ``stale``.
- **Subtree sizes** are counted by the unit itself as route entries are written, so the host
  writes only the route table.
- **Never blocking**: ``rx.ready`` is always 1.  Forwarded completions wait in a queue of
  ``max_nodes`` entries that cannot overflow (a subject enters at most once per barrier and
  the queue is flushed when the barrier changes: its contents are stale by then), and the
  downward fan-out is a count of RELEASEs owed to each child plus a KILL flag, not a queue, so
  no amount of backpressure on ``tx`` can make a unit refuse a notice.  No cycle of waits can
  form through the units whatever network joins them.
- **Latency** (no backpressure; L = cycles a link adds between one unit's ``tx`` and the next
  one's ``rx``, 0 for a wire): a unit decodes a notice (or a ``done`` strobe) into registers
  in the cycle it takes it, acts on it in the next, and forwards it 3 cycles after taking it,
  so one tree hop costs h = L + 3 cycles.  For a last completion signalled at cycle t by a
  node at depth d, a node at depth D sees ``released`` at cycle t + (d + D)·h + 3 + Σ i,
  where Σ i adds, at each level of its path, the number of notices its parent sent to
  earlier siblings first.
- **Timing**: no sum is compared in the cycle that uses it.  The root's decision reads flops
  only (ones ≥ m, ones = N and now − s ≥ c are computed a cycle ahead, for one and two more
  counts), the stamps are written a cycle later from a registered ``now``, and ``tx`` is
  loaded from flops chosen by flags kept beside the counts.  See docs/barrier.md, "Pipeline".
"""


from amaranth.hdl import Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from .checks import ConfigChecks
from .count import CompletionCounter
from .decode import NoticeDecoder
from .errors import ErrorFlags
from .execute import ExecuteStage
from .fanout import ReleaseFanout
from .gates import check_int, check_log_depth
from .kills import KillControl
from .layouts import (AcSubMode, BarrierMode, BarrierNoticeKind, BARRIER_ERROR_LAYOUT,
                      DEFAULT_LOG_DEPTH, MAX_CHILDREN_LIMIT, MAX_NODES_LIMIT, NOTICE_LAYOUT,
                      SEQ_WIDTH, STAMP_FLAGS, TIME_WIDTH, notice_stream)
from .queue import CompletionQueue
from .route import RouteTable
from .send import NoticeSender
from ..tree import BarrierTree
from ..net.packet import DEST_WIDTH
from ..lib.mirrors import Mirrored


__all__ = [
    "BarrierNoticeKind", "BarrierMode", "AcSubMode",
    "NOTICE_LAYOUT", "BARRIER_ERROR_LAYOUT", "STAMP_FLAGS", "SEQ_WIDTH", "TIME_WIDTH",
    "MAX_NODES_LIMIT", "MAX_CHILDREN_LIMIT", "DEFAULT_LOG_DEPTH",
    "notice_stream", "BarrierUnit", "tree_tables",
]


def _feed(module, part, /, **values):
    """Drive ``part``'s input members from ``values``, by name."""
    module.d.comb += [getattr(part, name).eq(value) for name, value in values.items()]


class BarrierUnit(Mirrored, wiring.Component):
    """One node's barrier unit.

    Parameters
    ----------
    max_nodes : int
        Width of the bit vector: node ids 0 .. max_nodes − 1 (1 .. 4096).
    max_children : int
        Child slots (1 .. 64).
    log_depth : int
        Entries of the root's abort log: a power of two, 16 .. 1024.
    dst_checked : bool
        The sender of ``rx`` compares each notice's ``dst`` with ``node_id`` and its ``src``
        with ``parent_id`` and each ``child_id`` itself and gives the results on
        ``rx_to_me``, ``rx_from_parent`` (``In(1)`` each) and ``rx_from_child``
        (``In(max_children)``), with ``rx``, as NicCore's header receiver does; without it
        the unit compares.

    Members
    -------
    tx : ``Out(notice_stream())``
        Notices this node sends, ``dst`` set.  ``valid``/``payload`` come from flops.
    rx : ``In(notice_stream())``
        Notices for this node; ``ready`` is always 1.  Each is registered at the unit's
        boundary as it is taken, decoded in the next cycle and acted on in the one after
        (``done`` skips the boundary register).
    now : ``In(64)``
        The NIC's free-running cycle counter; every stamp is a value of it.

    Configuration (static while barriers run):
    ``node_id``, ``parent_id`` : ``In(16)``; ``has_parent`` : ``In(1)`` (0: this is the root);
    ``child_id`` : ``In(ArrayLayout(16, max_children))``; ``child_valid`` : ``In(max_children)``;
    route table write port ``route_we`` : ``In(1)``, ``route_addr`` : ``In(16)``,
    ``route_data`` : ``In(route_width)`` (0: the id is not below this node; j + 1: it is in the
    subtree of child slot j; own id must be 0); ``route_rdata`` : ``Out(route_width)``, the
    entry at ``route_addr``; ``route_clear`` : ``In(1)`` empties the table (and clears the
    ``cfg_write`` error).  A write or a clear lands in the table three clock edges after the
    cycle it is made in (two register stages, so the entry it replaces is read from flops);
    the routing of received notices follows a cycle later (each slot's routed ids are flops),
    the configuration checks follow a cycle later (the gate they make on counting and
    releasing, a cycle after that) and ``total`` two (its adder tree has two register stages;
    the count flags that compare with it, two more).

    Control (only the root's matter, except ``start``, ``done`` and ``done_seq``):
    ``mode`` : ``In(BarrierMode)``, ``ac_sub`` : ``In(AcSubMode)``, ``m`` : ``In(16)``,
    ``c`` : ``In(64)``, ``estimate`` : ``In(64)``; strobes ``start`` with ``start_seq``
    (start_ac_region: clear vectors, stamps, counters, the log) and ``done`` with
    ``done_seq`` (this node's host finished barrier ``done_seq``).

    Status: ``seq``, ``finished``, ``released``, ``released_at``, ``aborted``, ``abort_seq``,
    ``abort_estimate``, ``vector``, ``ones``, ``total``, ``s``, ``mt``, ``e``, ``stamp_valid``,
    ``stamp_seq``, ``release_ones``, ``stale``, ``errors``, ``error``; abort log ``log_index``
    in, ``log_seq``, ``log_ids``, ``log_count``, ``log_overflow`` out.  See docs/barrier.md.
    """

    def __init__(self, max_nodes, max_children, *, log_depth=DEFAULT_LOG_DEPTH, dst_checked=False):
        check_int("max_nodes", max_nodes, 1, MAX_NODES_LIMIT)
        if not isinstance(dst_checked, bool):
            raise TypeError(f"dst_checked must be a bool, not {dst_checked!r}")
        check_int("max_children", max_children, 1, MAX_CHILDREN_LIMIT)
        check_log_depth(log_depth)
        self._max_nodes = max_nodes
        self._max_children = max_children
        self._log_depth = log_depth
        self._route_width = bits_for(max_children)
        self._dst_checked = dst_checked
        self._mirrored = ()
        super().__init__({
            "tx": Out(notice_stream()),
            "rx": In(notice_stream()),
            **({"rx_to_me": In(1), "rx_from_parent": In(1), "rx_from_child": In(max_children)}
               if dst_checked else {}),
            "now": In(TIME_WIDTH),
            # configuration
            "node_id": In(DEST_WIDTH),
            "parent_id": In(DEST_WIDTH),
            "has_parent": In(1),
            "child_id": In(data.ArrayLayout(DEST_WIDTH, max_children)),
            "child_valid": In(max_children),
            "route_we": In(1),
            "route_addr": In(DEST_WIDTH),
            "route_data": In(self._route_width),
            "route_rdata": Out(self._route_width),
            "route_clear": In(1),
            # control
            "mode": In(BarrierMode),
            "ac_sub": In(AcSubMode, init=AcSubMode.COUNT),
            "m": In(16),
            "c": In(TIME_WIDTH),
            "estimate": In(TIME_WIDTH),
            "start": In(1),
            "start_seq": In(SEQ_WIDTH),
            "done": In(1),
            "done_seq": In(SEQ_WIDTH),
            # status
            "seq": Out(SEQ_WIDTH),
            "finished": Out(1),
            "released": Out(1),
            "released_at": Out(TIME_WIDTH),
            "aborted": Out(1),
            "abort_seq": Out(SEQ_WIDTH),
            "abort_estimate": Out(TIME_WIDTH),
            "vector": Out(max_nodes),
            "ones": Out(16),
            "total": Out(16),
            "s": Out(TIME_WIDTH),
            "mt": Out(TIME_WIDTH),
            "e": Out(TIME_WIDTH),
            "stamp_valid": Out(STAMP_FLAGS),
            "stamp_seq": Out(SEQ_WIDTH),
            "release_ones": Out(16),
            "stale": Out(32),
            "errors": Out(BARRIER_ERROR_LAYOUT),
            "error": Out(1),
            # abort log (root)
            "log_index": In(range(log_depth)),
            "log_seq": Out(SEQ_WIDTH),
            "log_ids": Out(max_nodes),
            "log_count": Out(16),
            "log_overflow": Out(1),
        })

    @property
    def max_nodes(self):
        return self._max_nodes

    @property
    def max_children(self):
        return self._max_children

    @property
    def log_depth(self):
        return self._log_depth

    @property
    def route_width(self):
        """Bits of one route entry: 0 = not below this node, j + 1 = under child slot j."""
        return self._route_width

    def elaborate(self, platform):
        m = Module()
        n, k = self._max_nodes, self._max_children
        # The node's id through a register of the unit's own (configuration is static while
        # barriers run), so that on a board the copy the core fans out to every block is
        # not the start of the notices' `dst == node_id` compare.  (Inside `nicoll synth`'s
        # harness before 56f48b2, this register was merged with the harness's input chain,
        # whose stages were plain copies: the 64-bit core's path at every seed of 1b86574,
        # docs/engine.md.)  NoticeDecoder keeps a second copy for that compare alone.
        node_id = Signal.like(self.node_id, name="node_id_q", reset_less=True)
        m.d.sync += node_id.eq(self.node_id)
        config = {name: getattr(self, name) for name in ("parent_id", "has_parent", "child_id",
                                                         "child_valid")}
        # The parts, in the order of the stages a notice goes through.
        m.submodules.route = route = RouteTable(n, k)
        m.submodules.checks = checks = ConfigChecks(n, k)
        m.submodules.decoder = decoder = NoticeDecoder(n, k, dst_checked=self._dst_checked)
        m.submodules.execute = execute = ExecuteStage(k)
        m.submodules.count = count = CompletionCounter(n, k)
        m.submodules.queue = queue = CompletionQueue(n)
        m.submodules.kills = kills = KillControl(n, k, log_depth=self._log_depth)
        m.submodules.fanout = fanout = ReleaseFanout(k)
        m.submodules.sender = sender = NoticeSender(n, k)
        m.submodules.errors = errors = ErrorFlags()

        _feed(m, route, route_we=self.route_we, route_addr=self.route_addr,
              route_data=self.route_data, route_clear=self.route_clear,
              child_valid=self.child_valid, node_id=node_id)
        m.d.comb += [self.route_rdata.eq(route.route_rdata), self.total.eq(route.total)]

        _feed(m, checks, node_id=node_id, **config, routed_any=route.routed_any,
              routed_to=route.routed_to, size=route.size, total=route.total,
              cfg_write=errors.cfg_write, m=self.m, c=self.c, mode=self.mode,
              ac_sub=self.ac_sub)

        # seq + 1, kept beside seq (the decode compares a notice's seq with both).
        seq_inc = Signal(SEQ_WIDTH, init=1)
        wiring.connect(m, wiring.flipped(self.rx), decoder.rx)
        if self._dst_checked:
            _feed(m, decoder, rx_to_me=self.rx_to_me, rx_from_parent=self.rx_from_parent,
                  rx_from_child=self.rx_from_child)
        _feed(m, decoder, node_id=self.node_id, node_id_q=node_id, **config,
              routed_to=route.routed_to, shadow=checks.shadow, cfg_ok=checks.cfg_ok,
              seq=self.seq, seq_inc=seq_inc, vector=count.vector, done=self.done,
              done_seq=self.done_seq, start=self.start)

        _feed(m, execute, x=decoder.x, nonzero=count.nonzero, decide=count.decide,
              time_hit=count.time_hit, ge_m=count.ge_m, eq_total=count.eq_total,
              can_all=checks.can_all, can_count=checks.can_count, can_time=checks.can_time,
              own_done=count.own_done, aborted_cur=kills.aborted_cur)
        rel_now = execute.rel_now

        _feed(m, count, now=self.now, node_id=node_id, x=decoder.x,
              c_count=execute.c_count, d_count=execute.d_count, c_new=execute.c_new,
              d_new=execute.d_new, rel_now=rel_now, start=self.start, seq=self.seq,
              **{name: getattr(checks, name) for name in (
                  "m_minus", "total_minus", "ge_m_zero", "eq_total_zero", "c_le", "c_minus_3",
                  "can_all_next", "can_count_next", "can_time_next")})
        m.d.comb += [getattr(self, name).eq(getattr(count, name)) for name in (
            "vector", "ones", "released", "released_at", "s", "mt", "e", "stamp_valid",
            "stamp_seq", "release_ones")]
        m.d.comb += self.finished.eq(count.own_done)

        _feed(m, queue, c_count=execute.c_count, has_parent=self.has_parent,
              subject=decoder.x.subject, pop=sender.pop, rel_now=rel_now, start=self.start)

        _feed(m, kills, kill_rx=execute.kill_rx, early=execute.early, rel_now=rel_now,
              d_new=execute.d_new, own_done=count.own_done, vector=count.vector,
              done_in=count.done_in, size=route.size, member=route.member,
              has_parent=self.has_parent, child_valid=self.child_valid,
              estimate=self.estimate, x_estimate=decoder.x.estimate, seq=self.seq,
              start=self.start, log_index=self.log_index)
        m.d.comb += [getattr(self, name).eq(getattr(kills, name)) for name in (
            "aborted", "abort_seq", "abort_estimate", "log_seq", "log_ids", "log_count",
            "log_overflow")]

        _feed(m, fanout, rel_now=rel_now, rel_kill=kills.rel_kill,
              child_valid=self.child_valid, load=sender.load, start=self.start,
              start_seq=self.start_seq)
        wiring.connect(m, sender.tx, wiring.flipped(self.tx))
        _feed(m, sender, node_id=node_id, parent_id=self.parent_id,
              has_parent=self.has_parent, child_id=self.child_id, seq=self.seq,
              d_count=execute.d_count, rel_now=rel_now, start=self.start,
              owed=fanout.owed, owed_any=fanout.owed_any, kill_head=fanout.kill_head,
              head=fanout.head, kill_est_now=kills.kill_est_now,
              q_pending=queue.pending, q_head=queue.head)

        _feed(m, errors, cfg=checks.cfg, write_bad=route.write_bad,
              route_clear=self.route_clear, outside=execute.outside,
              malformed=execute.malformed, rx_stale=execute.rx_stale, late=execute.late,
              d_stale=execute.d_stale, start=self.start)
        m.d.comb += [self.stale.eq(errors.stale), self.errors.eq(errors.errors),
                     self.error.eq(errors.error)]

        # Leaving a barrier; start_ac_region (each part clears its own registers).
        with m.If(rel_now):
            m.d.sync += [self.seq.eq(self.seq + 1), seq_inc.eq(seq_inc + 1)]
        with m.If(self.start):
            m.d.sync += [self.seq.eq(self.start_seq), seq_inc.eq(self.start_seq + 1)]
        self._mirrored = (execute, kills, fanout)
        return m


# ---- Host-side tree description ------------------------------------------------------------
# The tree itself (shapes, the checks that it is one tree, routes) is nicoll.hw.tree.BarrierTree,
# shared with the driver; this only turns it into what each unit's ports take.

def tree_tables(tree, max_children):
    """What the host writes into each unit for ``tree``: one dict per node.

    ``tree`` is a :class:`nicoll.hw.tree.BarrierTree` (``BarrierTree.binary(n)`` is the default
    shape; ``kary``, ``chain`` or any parent list) or a parent list, checked by it.  Each
    dict holds ``parent`` (id or None), ``children`` (ids in slot order), ``routes``
    ({id: slot + 1} for every id below the node: the route table's entries) and ``depth``.
    Raises ``NicollError`` (a ``ValueError``) for a cycle, several roots or none, a parent out
    of range; ``ValueError`` for more than ``max_children`` children or ``MAX_NODES_LIMIT``
    nodes.
    """
    check_int("max_children", max_children, 1, MAX_CHILDREN_LIMIT)
    if not isinstance(tree, BarrierTree):
        tree = BarrierTree(tree)
    if len(tree) > MAX_NODES_LIMIT:
        raise ValueError(f"a tree of {len(tree)} nodes has more than {MAX_NODES_LIMIT}")
    tables = []
    for node in range(len(tree)):
        children = tree.children(node)
        if len(children) > max_children:
            raise ValueError(f"node {node} has {len(children)} children, more than "
                             f"max_children = {max_children!r}")
        tables.append({"parent": tree.parent(node), "children": children,
                       "routes": {x: slot + 1 for x, slot in tree.route(node).items()},
                       "depth": tree.depth(node)})
    return tables
