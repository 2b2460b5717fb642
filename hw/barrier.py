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
  one's ``rx``, 0 for a wire): a unit forwards a notice 2 cycles after taking it, so one tree
  hop costs h = L + 2 cycles.  For a last completion signalled at cycle t by a node at depth d,
  a node at depth D sees ``released`` at cycle t + (d + D)·h + 2 + Σ i, where Σ i adds, at
  each level of its path, the number of notices its parent sent to earlier siblings first.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2

from ..tree import BarrierTree
from .packet import DEST_WIDTH


__all__ = [
    "NoticeKind", "BarrierMode", "AcSubMode",
    "NOTICE_LAYOUT", "ERROR_LAYOUT", "STAMP_FLAGS", "SEQ_WIDTH", "TIME_WIDTH",
    "MAX_NODES_LIMIT", "MAX_CHILDREN_LIMIT",
    "notice_stream", "BarrierUnit", "tree_tables",
]


#: Width of the barrier sequence number every notice carries.
SEQ_WIDTH = 16
#: Width of the cycle stamps, of ``now``, of ``c`` and of the estimate.
TIME_WIDTH = 64
#: Largest ``max_nodes``: the bit vector and the route table grow linearly with it.
MAX_NODES_LIMIT = 4096
#: Largest ``max_children``: the duplicate-child check grows with its square.
MAX_CHILDREN_LIMIT = 64


class NoticeKind(enum.Enum, shape=2):
    """What a notice says.  Ref: seed 004, fig. 1 (solid arrows: completion; dashed: kill)."""
    COMPLETE = 0    # node `subject` finished barrier `seq` (goes up)
    RELEASE = 1     # barrier `seq` is over (goes down to every child)
    KILL = 2        # abort unfinished work of barrier `seq`, use `estimate` (goes down)


class BarrierMode(enum.Enum, shape=2):
    """The root's decision rule.  Ref: seed 004, "mode 0 / 1 / 2"."""
    NORMAL = 0      # release when every bit is set
    AC = 1          # release early on a count or time threshold, kill the unfinished
    COLLECT = 2     # release like NORMAL, record s, mt, e


class AcSubMode(enum.Enum, shape=2):
    """Which thresholds mode AC uses: bit 0 = count (m), bit 1 = time (c).  0 is an error.
    Ref: seed 004 (the three sub-modes of mode 1 at the end of the description)."""
    COUNT = 1
    TIME = 2
    BOTH = 3


#: One barrier notice: a flat struct (130 bits) that fits a network packet header.
NOTICE_LAYOUT = data.StructLayout({
    "kind": NoticeKind,
    "seq": SEQ_WIDTH,
    "src": DEST_WIDTH,          # the node that sent this notice
    "dst": DEST_WIDTH,          # the node it goes to
    "subject": DEST_WIDTH,      # COMPLETE: the node that finished; 0 otherwise
    "estimate": TIME_WIDTH,     # KILL: the root's estimate of the aborted result; 0 otherwise
})

#: Error bits.  The first three and the ``cfg_*`` bits except ``cfg_write`` follow the current
#: inputs, shown a cycle late (the decision itself checks m, c and the mode in the same
#: cycle); ``outside`` and ``notice`` stay set until ``start``; ``cfg_write`` stays set until
#: ``route_clear``.  What they stop: a root with a bad m, c or mode decides by the normal rule
#: (all done, no kill); a unit with a ``cfg_*`` error counts no completion (its own included)
#: and, at the root, never releases; an ``outside`` or ``notice`` notice is dropped.
ERROR_LAYOUT = data.StructLayout({
    "m_range": 1,       # root, AC with a count sub-mode: m = 0 or m > N
    "c_zero": 1,        # root, AC with a time sub-mode: c = 0
    "mode": 1,          # root: mode 3, or AC with sub-mode 0
    "cfg_id": 1,        # own, parent or a valid child id is >= max_nodes
    "cfg_slot": 1,      # a route entry names a child slot that is not valid
    "cfg_self": 1,      # own id routed to a child, or a valid child id equal to own id
    "cfg_parent": 1,    # parent id is own id or routed into own subtree
    "cfg_dup": 1,       # two valid child slots hold the same id
    "cfg_child": 1,     # a valid child's own id is not routed to its slot
    "cfg_write": 1,     # a route write with an address >= max_nodes or an entry > max_children
    "outside": 1,       # a COMPLETE whose subject is not in the sending child's subtree
    "notice": 1,        # a notice not for this node, from neither parent nor child, or of a
                        # kind that cannot come from its sender
})

#: Which of the stamps s, mt, e of the last released barrier were recorded.
STAMP_FLAGS = data.StructLayout({"s": 1, "mt": 1, "e": 1})


def notice_stream():
    """``stream.Signature`` of notices (the sender's view; a receiving port is ``In(...)``)."""
    return stream.Signature(NOTICE_LAYOUT)


def _check_int(name, value, low, high):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, not {value!r}")


def _any(terms):
    terms = list(terms)
    return Cat(terms).any() if terms else Const(0)


class BarrierUnit(wiring.Component):
    """One node's barrier unit.

    Parameters
    ----------
    max_nodes : int
        Width of the bit vector: node ids 0 .. max_nodes − 1 (1 .. 4096).
    max_children : int
        Child slots (1 .. 64).
    log_depth : int
        Entries of the root's abort log: a power of two, 16 .. 1024.

    Members
    -------
    tx : ``Out(notice_stream())``
        Notices this node sends, ``dst`` set.  ``valid``/``payload`` come from flops.
    rx : ``In(notice_stream())``
        Notices for this node; ``ready`` is always 1.
    now : ``In(64)``
        The NIC's free-running cycle counter; every stamp is a value of it.

    Configuration (static while barriers run):
    ``node_id``, ``parent_id`` : ``In(16)``; ``has_parent`` : ``In(1)`` (0: this is the root);
    ``child_id`` : ``In(ArrayLayout(16, max_children))``; ``child_valid`` : ``In(max_children)``;
    route table write port ``route_we`` : ``In(1)``, ``route_addr`` : ``In(16)``,
    ``route_data`` : ``In(route_width)`` (0: the id is not below this node; j + 1: it is in the
    subtree of child slot j; own id must be 0); ``route_rdata`` : ``Out(route_width)``, the
    entry at ``route_addr``; ``route_clear`` : ``In(1)`` empties the table (and clears the
    ``cfg_write`` error) in one cycle.

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

    def __init__(self, max_nodes, max_children, *, log_depth=16):
        _check_int("max_nodes", max_nodes, 1, MAX_NODES_LIMIT)
        _check_int("max_children", max_children, 1, MAX_CHILDREN_LIMIT)
        if not isinstance(log_depth, int) or isinstance(log_depth, bool):
            raise TypeError(f"log_depth must be an integer, not {log_depth!r}")
        if log_depth < 16 or log_depth > 1024 or log_depth & (log_depth - 1):
            raise ValueError(f"log_depth must be a power of two between 16 and 1024, "
                             f"not {log_depth!r}")
        self._max_nodes = max_nodes
        self._max_children = max_children
        self._log_depth = log_depth
        self._route_width = bits_for(max_children)
        super().__init__({
            "tx": Out(notice_stream()),
            "rx": In(notice_stream()),
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
            "errors": Out(ERROR_LAYOUT),
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
        n, k, rw = self._max_nodes, self._max_children, self._route_width
        ibits = max(1, ceil_log2(n))          # bits that index the vector and the route table

        node_id, parent_id, has_parent = self.node_id, self.parent_id, self.has_parent
        is_root = ~has_parent
        valid = self.child_valid
        cid = [self.child_id[j] for j in range(k)]
        now = self.now

        # ---- Route table and subtree sizes --------------------------------------------------
        # Flops rather than a memory: the local tree checks read it at several ids at once.
        route = Signal(n * rw)

        def route_at(x):
            return Mux(x < n, route.word_select(x[:ibits], rw), 0)

        # size[j]: ids routed to slot j, kept up to date at every write (no re-count).
        size = [Signal(range(n + 1), name=f"size_{j}") for j in range(k)]
        old = Signal(rw)
        m.d.comb += [old.eq(route_at(self.route_addr)), self.route_rdata.eq(old)]
        write_ok = (self.route_addr < n) & (self.route_data <= k)
        write_bad = Signal()
        with m.If(self.route_clear):
            m.d.sync += [route.eq(0), *[size[j].eq(0) for j in range(k)]]
        with m.Elif(self.route_we):
            with m.If(write_ok):
                m.d.sync += route.word_select(self.route_addr[:ibits], rw).eq(self.route_data)
                for j in range(k):
                    inc = self.route_data == j + 1
                    dec = old == j + 1
                    with m.If(inc & ~dec):
                        m.d.sync += size[j].eq(size[j] + 1)
                    with m.Elif(dec & ~inc):
                        m.d.sync += size[j].eq(size[j] - 1)
            with m.Else():
                m.d.comb += write_bad.eq(1)

        # N of this subtree (the whole tree at the root), registered.
        total = Signal(16)
        m.d.sync += total.eq(1 + sum(Mux(valid[j], size[j], 0) for j in range(k)))
        m.d.comb += self.total.eq(total)

        # Members of this subtree, for the abort log: routed below, or this node itself.
        member = Signal(n)
        m.d.comb += member.eq(Cat((route[i * rw:(i + 1) * rw] != 0) | (node_id == i)
                                  for i in range(n)))

        # ---- Local tree checks (registered: they are wide and the tree is static) ----------
        live = Signal(ERROR_LAYOUT)
        m.d.comb += [
            live.cfg_id.eq((node_id >= n) | (has_parent & (parent_id >= n))
                           | _any(valid[j] & (cid[j] >= n) for j in range(k))),
            live.cfg_slot.eq(_any(~valid[j] & (size[j] != 0) for j in range(k))),
            live.cfg_self.eq((route_at(node_id) != 0)
                             | _any(valid[j] & (cid[j] == node_id) for j in range(k))),
            live.cfg_parent.eq(has_parent & ((parent_id == node_id) | (route_at(parent_id) != 0))),
            live.cfg_dup.eq(_any(valid[i] & valid[j] & (cid[i] == cid[j])
                                 for i in range(k) for j in range(i + 1, k))),
            live.cfg_child.eq(_any(valid[j] & (route_at(cid[j]) != j + 1) for j in range(k))),
        ]
        # Parameter checks only bind the root (the others ignore mode, m and c).  They gate
        # the decision combinationally, so a bad m or c never acts even for one cycle.
        mode = self.mode
        sub = self.ac_sub.as_value()
        in_ac = mode == BarrierMode.AC
        m_range = Signal()
        c_zero = Signal()
        mode_bad = Signal()
        m.d.comb += [
            m_range.eq(is_root & in_ac & sub[0] & ((self.m == 0) | (self.m > total))),
            c_zero.eq(is_root & in_ac & sub[1] & (self.c == 0)),
            mode_bad.eq(is_root & ((mode.as_value() == 3) | (in_ac & (sub == 0)))),
        ]
        cfg_reg = Signal(ERROR_LAYOUT)
        m.d.sync += [
            cfg_reg.cfg_id.eq(live.cfg_id), cfg_reg.cfg_slot.eq(live.cfg_slot),
            cfg_reg.cfg_self.eq(live.cfg_self), cfg_reg.cfg_parent.eq(live.cfg_parent),
            cfg_reg.cfg_dup.eq(live.cfg_dup), cfg_reg.cfg_child.eq(live.cfg_child),
            cfg_reg.m_range.eq(m_range), cfg_reg.c_zero.eq(c_zero), cfg_reg.mode.eq(mode_bad),
        ]
        sticky = Signal(ERROR_LAYOUT)       # only cfg_write, outside, notice are used
        cfg_ok = ~(cfg_reg.cfg_id | cfg_reg.cfg_slot | cfg_reg.cfg_self | cfg_reg.cfg_parent
                   | cfg_reg.cfg_dup | cfg_reg.cfg_child | sticky.cfg_write)
        params_ok = ~(m_range | c_zero | mode_bad)
        m.d.comb += [
            self.errors.eq(cfg_reg.as_value() | sticky.as_value()),
            self.error.eq(self.errors.as_value().any()),
        ]

        # ---- Barrier state ----------------------------------------------------------------
        seq = self.seq
        vector = self.vector
        ones = Signal(range(n + 1))
        done_in = [Signal(range(n + 1), name=f"done_in_{j}") for j in range(k)]
        killed = Signal()               # a KILL for the current seq came from the parent
        kill_est = Signal(TIME_WIDTH)   # the estimate the next KILLs carry
        own_pending = Signal()          # own COMPLETE still to send
        own_bit = vector.bit_select(node_id[:ibits], 1)
        m.d.comb += [self.ones.eq(ones), self.finished.eq(own_bit)]

        # Stamps of the barrier in progress; copied to s/mt/e when it is released.
        cur_s = Signal(TIME_WIDTH)
        cur_mt = Signal(TIME_WIDTH)
        cur_e = Signal(TIME_WIDTH)
        cur_flags = Signal(STAMP_FLAGS)

        # ---- Receiving ----------------------------------------------------------------------
        # Ref: seed 004, figs. 9 and 11.  Nothing here ever waits, see the module docstring.
        p = self.rx.payload
        m.d.comb += self.rx.ready.eq(1)
        take = self.rx.valid
        from_child_vec = Signal(k)
        m.d.comb += from_child_vec.eq(Cat(valid[j] & (cid[j] == p.src) for j in range(k)))
        slot = Signal(range(max(k, 2)))
        for j in reversed(range(k)):
            with m.If(from_child_vec[j]):
                m.d.comb += slot.eq(j)
        from_parent = has_parent & (p.src == parent_id)
        is_complete = p.kind == NoticeKind.COMPLETE
        is_release = p.kind == NoticeKind.RELEASE
        is_kill = p.kind == NoticeKind.KILL
        well_formed = (p.dst == node_id) & (
            (is_complete & from_child_vec.any()) | ((is_release | is_kill) & from_parent))
        seq_ok = p.seq == seq
        rx_current = Signal()
        rx_stale = Signal()
        m.d.comb += [
            rx_current.eq(take & well_formed & seq_ok),
            rx_stale.eq(take & well_formed & ~seq_ok),
        ]
        rel_rx = rx_current & is_release
        kill_rx = Signal()
        m.d.comb += kill_rx.eq(rx_current & is_kill)

        # ---- Root decision (fig. 10) ------------------------------------------------------
        all_done = ones == total
        elapsed = (now - cur_s)[:TIME_WIDTH]
        count_hit = sub[0] & (ones >= self.m)
        time_hit = sub[1] & cur_flags.s & (elapsed >= self.c)
        decide = Signal()
        early = Signal()
        m.d.comb += [
            decide.eq(is_root & cfg_ok & (ones != 0)
                      & (all_done | (in_ac & params_ok & (count_hit | time_hit)))),
            early.eq(decide & ~all_done),
        ]
        rel_now = Signal()              # this node leaves barrier `seq` in this cycle
        m.d.comb += rel_now.eq(rel_rx | decide)

        # ---- Completions -------------------------------------------------------------------
        subj = p.subject
        inside = (subj < n) & (route_at(subj) == slot + 1)
        c_cur = rx_current & is_complete
        c_new = Signal()                # a COMPLETE that sets a new bit
        d_new = Signal()                # the host's done that sets the own bit
        d_stale = Signal()
        aborted_cur = self.aborted & (self.abort_seq == seq)
        subj_bit = vector.bit_select(subj[:ibits], 1)
        m.d.comb += [
            c_new.eq(c_cur & ~rel_now & cfg_ok & inside & ~subj_bit),
            d_new.eq(self.done & (self.done_seq == seq) & ~aborted_cur & ~kill_rx & ~rel_now
                     & cfg_ok & ~own_bit),
            # A done for another barrier, for one this node is aborted in (or in the cycle
            # the KILL comes), or in the cycle its barrier is released, never counts.
            d_stale.eq(self.done & ((self.done_seq != seq) | aborted_cur | kill_rx | rel_now)),
        ]
        late = c_cur & rel_now          # root only: the decision was taken without it
        with m.If(d_new):
            m.d.sync += vector.bit_select(node_id[:ibits], 1).eq(1)
            with m.If(has_parent):
                m.d.sync += own_pending.eq(1)
        with m.If(c_new):
            m.d.sync += vector.bit_select(subj[:ibits], 1).eq(1)
        for j in range(k):
            with m.If(c_new & (slot == j)):
                m.d.sync += done_in[j].eq(done_in[j] + 1)
        ones_next = ones + c_new + d_new
        m.d.sync += ones.eq(ones_next)

        # Stamps (fig. 12: SR, MR', ER).  Kept by every unit; only the root's mean anything.
        with m.If((ones == 0) & (c_new | d_new)):
            m.d.sync += [cur_s.eq(now), cur_flags.s.eq(1)]
        with m.If((self.m != 0) & (ones < self.m) & (ones_next >= self.m)):
            m.d.sync += [cur_mt.eq(now), cur_flags.mt.eq(1)]
        with m.If((ones != total) & (ones_next == total)):
            m.d.sync += [cur_e.eq(now), cur_flags.e.eq(1)]

        # ---- Forwarding completions up: a queue that cannot overflow -----------------------
        qdepth = max(n, 2)
        upq = Memory(shape=unsigned(ibits), depth=qdepth, init=[])
        m.submodules.upq = upq
        qw = upq.write_port()
        qr = upq.read_port(domain="comb")
        q_wr = Signal(range(qdepth))
        q_rd = Signal(range(qdepth))
        q_count = Signal(range(qdepth + 1))
        push = c_new & has_parent
        m.d.comb += [qw.addr.eq(q_wr), qw.data.eq(subj[:ibits]), qw.en.eq(push),
                     qr.addr.eq(q_rd)]

        # ---- Kills and the abort log ---------------------------------------------------------
        own_kill = (kill_rx | early) & ~own_bit
        with m.If(own_kill):
            m.d.sync += [
                self.aborted.eq(1),
                self.abort_seq.eq(seq),
                self.abort_estimate.eq(Mux(is_root, self.estimate, p.estimate)),
            ]
        with m.If(kill_rx):
            m.d.sync += [killed.eq(1), kill_est.eq(p.estimate)]
        with m.If(early):
            m.d.sync += kill_est.eq(self.estimate)
        # Children that get a KILL for the barrier released now: those whose subtree is not
        # complete here, if this node was killed (or is the root releasing early).
        # Ref: seed 004, fig. 11 step s53.
        rel_kill = [valid[j] & (done_in[j] != size[j]) & Mux(is_root, early, killed)
                    for j in range(k)]

        log_entry = data.StructLayout({"seq": SEQ_WIDTH, "ids": n})
        log = Memory(shape=log_entry, depth=self._log_depth, init=[])
        m.submodules.log = log
        lw = log.write_port()
        lr = log.read_port(domain="comb")
        log_ptr = Signal(range(self._log_depth))
        m.d.comb += [
            lw.addr.eq(log_ptr), lw.en.eq(early),
            lw.data.seq.eq(seq), lw.data.ids.eq(member & ~vector),
            lr.addr.eq(self.log_index),
            self.log_seq.eq(lr.data.seq), self.log_ids.eq(lr.data.ids),
        ]
        with m.If(early):
            m.d.sync += log_ptr.eq(log_ptr + 1)
            with m.If(self.log_count != 0xffff):
                m.d.sync += self.log_count.eq(self.log_count + 1)
            with m.If(self.log_count >= self._log_depth):
                m.d.sync += self.log_overflow.eq(1)

        # ---- Sending ------------------------------------------------------------------------
        # Per child: RELEASEs owed (`owe`) and whether a KILL goes before the oldest of them
        # (`kill_head`).  A child owed more than one RELEASE has not left the older barrier,
        # so nobody below it can have finished the newer ones: each newer barrier was an early
        # release that killed that subtree, and its KILL is implied.  Hence one flag suffices.
        owe = [Signal(SEQ_WIDTH, name=f"owe_{j}") for j in range(k)]
        kill_head = [Signal(name=f"kill_head_{j}") for j in range(k)]
        down_req = Signal(k)
        m.d.comb += down_req.eq(Cat(owe[j] != 0 for j in range(k)))
        pick = Signal(range(max(k, 2)))
        for j in reversed(range(k)):
            with m.If(down_req[j]):
                m.d.comb += pick.eq(j)
        owe_a, kill_a, cid_a = Array(owe), Array(kill_head), Array(cid)

        load = ~self.tx.valid | self.tx.ready
        send_down = load & down_req.any()
        send_own = load & ~down_req.any() & own_pending
        send_q = load & ~down_req.any() & ~own_pending & (q_count != 0)
        out = self.tx.payload
        with m.If(load):
            m.d.sync += self.tx.valid.eq(send_down | send_own | send_q)
            with m.If(send_down):
                m.d.sync += [
                    out.kind.eq(Mux(kill_a[pick], NoticeKind.KILL, NoticeKind.RELEASE)),
                    out.seq.eq(seq - owe_a[pick]),
                    out.src.eq(node_id),
                    out.dst.eq(cid_a[pick]),
                    out.subject.eq(0),
                    out.estimate.eq(Mux(kill_a[pick], kill_est, 0)),
                ]
            with m.Elif(send_own | send_q):
                m.d.sync += [
                    out.kind.eq(NoticeKind.COMPLETE),
                    out.seq.eq(seq),
                    out.src.eq(node_id),
                    out.dst.eq(parent_id),
                    out.subject.eq(Mux(send_own, node_id, qr.data)),
                    out.estimate.eq(0),
                ]
        with m.If(send_own):
            m.d.sync += own_pending.eq(0)
        with m.If(send_q):
            m.d.sync += q_rd.eq(Mux(q_rd == qdepth - 1, 0, q_rd + 1))
        with m.If(push):
            m.d.sync += q_wr.eq(Mux(q_wr == qdepth - 1, 0, q_wr + 1))
        m.d.sync += q_count.eq(q_count + push - send_q)

        for j in range(k):
            sending = send_down & (pick == j)
            send_kill = sending & kill_head[j]
            send_rel = sending & ~kill_head[j]
            inc = rel_now & valid[j]
            owe_after = owe[j] - send_rel
            with m.If(send_kill):
                m.d.sync += kill_head[j].eq(0)
            with m.If(send_rel):
                # The next oldest barrier owed, if any, was killed (see above); else the one
                # released now becomes the oldest, with its own KILL flag.
                m.d.sync += kill_head[j].eq(Mux(owe_after != 0, 1, inc & rel_kill[j]))
            with m.Elif(inc & (owe[j] == 0)):
                m.d.sync += kill_head[j].eq(rel_kill[j])
            m.d.sync += owe[j].eq(owe_after + inc)

        # ---- Leaving a barrier --------------------------------------------------------------
        with m.If(rel_now):
            m.d.sync += [
                seq.eq(seq + 1),
                vector.eq(0),
                ones.eq(0),
                killed.eq(0),
                own_pending.eq(0),
                # Queued completions of the old barrier are stale at the parent, which left it
                # before this node did: drop them.
                q_wr.eq(0), q_rd.eq(0), q_count.eq(0),
                cur_flags.eq(0),
                self.released.eq(1),
                self.released_at.eq(now),
                self.s.eq(cur_s), self.mt.eq(cur_mt), self.e.eq(cur_e),
                self.stamp_valid.eq(cur_flags),
                self.stamp_seq.eq(seq),
                self.release_ones.eq(ones),
            ]
            m.d.sync += [done_in[j].eq(0) for j in range(k)]
        with m.If(d_new):
            m.d.sync += [self.released.eq(0), self.aborted.eq(0)]

        m.d.sync += self.stale.eq(self.stale + (rx_stale | late) + d_stale)

        # A bad route write stays flagged across `start` (the table it left is still wrong)
        # until the table is cleared.
        with m.If(write_bad):
            m.d.sync += sticky.cfg_write.eq(1)
        with m.If(self.route_clear):
            m.d.sync += sticky.cfg_write.eq(0)
        with m.If(c_cur & ~inside):
            m.d.sync += sticky.outside.eq(1)
        with m.If(take & ~well_formed):
            m.d.sync += sticky.notice.eq(1)

        # ---- start_ac_region: a clean slate (the tx register is left to finish) --------------
        with m.If(self.start):
            m.d.sync += [
                seq.eq(self.start_seq),
                vector.eq(0), ones.eq(0), killed.eq(0), kill_est.eq(0), own_pending.eq(0),
                q_wr.eq(0), q_rd.eq(0), q_count.eq(0),
                cur_s.eq(0), cur_mt.eq(0), cur_e.eq(0), cur_flags.eq(0),
                self.released.eq(0), self.released_at.eq(0),
                self.aborted.eq(0), self.abort_seq.eq(0), self.abort_estimate.eq(0),
                self.s.eq(0), self.mt.eq(0), self.e.eq(0), self.stamp_valid.eq(0),
                self.stamp_seq.eq(0), self.release_ones.eq(0),
                self.stale.eq(0),
                sticky.outside.eq(0), sticky.notice.eq(0),
                log_ptr.eq(0), self.log_count.eq(0), self.log_overflow.eq(0),
            ]
            m.d.sync += [done_in[j].eq(0) for j in range(k)]
            m.d.sync += [owe[j].eq(0) for j in range(k)]
            m.d.sync += [kill_head[j].eq(0) for j in range(k)]
        return m


# ---- Host-side tree description ------------------------------------------------------------
# The tree itself (shapes, the checks that it is one tree, routes) is nicoll.tree.BarrierTree,
# shared with the driver; this only turns it into what each unit's ports take.

def tree_tables(tree, max_children):
    """What the host writes into each unit for ``tree``: one dict per node.

    ``tree`` is a :class:`nicoll.tree.BarrierTree` (``BarrierTree.binary(n)`` is the default
    shape; ``kary``, ``chain`` or any parent list) or a parent list, checked by it.  Each
    dict holds ``parent`` (id or None), ``children`` (ids in slot order), ``routes``
    ({id: slot + 1} for every id below the node: the route table's entries) and ``depth``.
    Raises ``NicollError`` (a ``ValueError``) for a cycle, several roots or none, a parent out
    of range; ``ValueError`` for more than ``max_children`` children or ``MAX_NODES_LIMIT``
    nodes.
    """
    _check_int("max_children", max_children, 1, MAX_CHILDREN_LIMIT)
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
