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

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, ceil_log2

from ..tree import BarrierTree
from ..net.packet import DEST_WIDTH


__all__ = [
    "BarrierNoticeKind", "BarrierMode", "AcSubMode",
    "NOTICE_LAYOUT", "BARRIER_ERROR_LAYOUT", "STAMP_FLAGS", "SEQ_WIDTH", "TIME_WIDTH",
    "MAX_NODES_LIMIT", "MAX_CHILDREN_LIMIT", "DEFAULT_LOG_DEPTH",
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
#: Abort-log entries a unit keeps unless told otherwise (16 to 1024, a power of two).
DEFAULT_LOG_DEPTH = 16


class BarrierNoticeKind(enum.Enum, shape=2):
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
    "kind": BarrierNoticeKind,
    "seq": SEQ_WIDTH,
    "src": DEST_WIDTH,          # the node that sent this notice
    "dst": DEST_WIDTH,          # the node it goes to
    "subject": DEST_WIDTH,      # COMPLETE: the node that finished; 0 otherwise
    "estimate": TIME_WIDTH,     # KILL: the root's estimate of the aborted result; 0 otherwise
})

#: Error bits.  The first three and the ``cfg_*`` bits except ``cfg_write`` follow the current
#: inputs, shown two cycles late (the decision acts on m, c and the mode one cycle after their
#: checks show, together with them, so a bad value never acts); ``outside`` and ``notice``
#: stay set until ``start``; ``cfg_write`` stays set until ``route_clear``.  What they stop:
#: a root with a bad m, c or mode decides by the normal rule (all done, no kill); a unit with
#: a ``cfg_*`` error counts no completion (its own included) and, at the root, never
#: releases; an ``outside`` or ``notice`` notice is dropped.
BARRIER_ERROR_LAYOUT = data.StructLayout({
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


def _below(value, limit):
    """``value < limit`` for a constant ``limit``: for a power of two, the zero test of the
    bits at and above it.  yosys maps the compare with a constant as a carry chain; the
    8-node unit's id checks (node, parent and child ids against the node count) were such
    chains from the configuration ports, its latest pin alone at seed 1 of 0ca1b4c
    (5.21 ns)."""
    if limit > 0 and limit & (limit - 1) == 0:
        bit = limit.bit_length() - 1
        return value[bit:] == 0 if len(value) > bit else Const(1, 1)
    return value < limit


def _any(terms):
    terms = list(terms)
    return Cat(terms).any() if terms else Const(0)


def _routed_part(s, j, index):
    """The part of slot ``j``'s routed-id vector that ``index``'s high bits select: its
    ``2**s.lo`` bits, the vector padded with zeros past ``s.n``.  A lookup of an id selects
    this part in one register stage and a bit of it by the id's low bits in the next."""
    if s.ibits <= s.lo:
        return s.routed_to[j]
    padded = Cat(s.routed_to[j], Const(0, (1 << s.ibits) - s.n))
    return padded.word_select(index[s.lo:s.ibits], 1 << s.lo)


def _first(flags, values):
    """(any flag, the value of the first flag set): a balanced priority multiplexer."""
    if len(flags) == 1:
        return flags[0], values[0]
    half = len(flags) // 2
    any_lo, lo = _first(flags[:half], values[:half])
    any_hi, hi = _first(flags[half:], values[half:])
    return any_lo | any_hi, Mux(any_lo, lo, hi)


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
        _check_int("max_nodes", max_nodes, 1, MAX_NODES_LIMIT)
        if not isinstance(dst_checked, bool):
            raise TypeError(f"dst_checked must be a bool, not {dst_checked!r}")
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
        self._dst_checked = dst_checked
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
        s = SimpleNamespace()           # nets shared by the stages below
        s.n, s.k, s.rw = self._max_nodes, self._max_children, self._route_width
        s.ibits = max(1, ceil_log2(s.n))    # bits that index the vector and the route table
        # The low index bits: a lookup of an id in a routed-id vector selects a part by the
        # rest in one register stage and a bit by these in the next (_boundary, _tree_checks).
        s.lo = (s.ibits + 1) // 2
        s.is_root = ~self.has_parent
        # The node's id through a register of the unit's own (configuration is static while
        # barriers run), so that on a board the copy the core fans out to every block is
        # not the start of the notices' `dst == node_id` compare.  (Inside `nicoll synth`'s
        # harness before 56f48b2, this register was merged with the harness's input chain,
        # whose stages were plain copies: the 64-bit core's path at every seed of 1b86574,
        # docs/engine.md.)
        s.node_id = Signal.like(self.node_id, name="node_id_q", reset_less=True)
        m.d.sync += s.node_id.eq(self.node_id)
        # A second copy for the notices' `dst == node_id` compare alone, stored inverted so
        # that synthesis keeps it apart: `node_id_q` also feeds the route lookups and the
        # member and tree checks, and its fan-out put it far from the decode (the 64-bit
        # core's path at seed 1 of the sixteenth pass: node_id_q -> to_me -> x_count_hit,
        # 6 levels, 6.36 of 7.85 ns routing).
        if not self._dst_checked:
            s.node_id_rx_n = Signal.like(self.node_id, name="node_id_rx_n", reset_less=True)
            m.d.sync += s.node_id_rx_n.eq(~self.node_id)
        s.cid = [self.child_id[j] for j in range(s.k)]
        self._route_table(m, s)
        self._tree_checks(m, s)
        self._control(m, s)
        self._boundary(m, s)
        self._decode(m, s)
        self._execute(m, s)
        self._count(m, s)
        self._queue(m, s)
        self._kills_and_log(m, s)
        self._send(m, s)
        self._leave(m, s)
        self._errors_and_stale(m, s)
        self._start(m, s)
        return m

    # ---- Route table and subtree sizes ------------------------------------------------------
    def _route_table(self, m, s):
        n, k, rw, ibits = s.n, s.k, s.rw, s.ibits
        # Flops rather than a memory: the local tree checks read it at several ids at once.
        s.route = route = Signal(n * rw)

        def route_at(x):
            return Mux(_below(x, n), route.word_select(x[:ibits], rw), 0)
        s.route_at = route_at

        # size[j]: ids routed to slot j, kept up to date at every write (no re-count).  A
        # write is registered first and lands two cycles later: the entry it replaces is
        # read from flops.
        s.size = size = [Signal(range(n + 1), name=f"size_{j}") for j in range(k)]
        m.d.comb += self.route_rdata.eq(route_at(self.route_addr))
        write_ok = _below(self.route_addr, n) & (self.route_data <= k)
        s.write_bad = Signal()
        m.d.comb += s.write_bad.eq(self.route_we & ~self.route_clear & ~write_ok)
        w_clear, w_we = Signal(), Signal()
        w_addr, w_data = Signal(ibits), Signal(rw)
        m.d.sync += [w_clear.eq(self.route_clear), w_we.eq(self.route_we & write_ok),
                     w_addr.eq(self.route_addr[:ibits]), w_data.eq(self.route_data)]
        # A second stage registers the entry the write replaces and which counts go up and
        # down, as one-hot slot vectors; it then writes the entry and steps the counts.  The
        # replaced entry is read from flops as the write enters the first stage (`w_old`,
        # with the write the second stage makes in that cycle forwarded), and the write the
        # second stage makes in the next cycle is forwarded by a flag compared then too
        # (`w_same`): the n:1 read and the address compare are not in the cycle that
        # decodes the entry (a 64-id table's read was the unit's critical path).
        x_clear, x_we = Signal(), Signal()
        x_addr, x_data = Signal(ibits), Signal(rw)
        x_inc, x_dec = Signal(k), Signal(k)
        # The read is split over the two stages like the notices' lookups (_boundary): the
        # first registers the part of the table the address's high bits select (2**lo
        # entries, the write in flight forwarded into it), the second selects the entry by
        # the low bits.  The whole 64:1 read from the port into the first stage was a late
        # pin of the 64-node unit alone at seed 1 of the thirty-second pass (route_addr ->
        # the read -> w_old, 5 levels, 5.26 ns).
        lo = s.lo
        w_part, w_same = Signal(rw << lo), Signal()
        in_addr = self.route_addr[:ibits]
        padded = Cat(route, Const(0, ((1 << ibits) - n) * rw))
        part = padded.word_select(in_addr[lo:], rw << lo) if ibits > lo else padded
        hi_same = x_we & (x_addr[lo:] == in_addr[lo:])
        m.d.sync += [w_part.word_select(e, rw).eq(
                         Mux(x_clear, 0, Mux(hi_same & (x_addr[:lo] == e), x_data,
                                             part.word_select(e, rw))))
                     for e in range(1 << lo)]
        m.d.sync += w_same.eq(w_we & ~w_clear & (w_addr == in_addr))
        old = Signal(rw)
        m.d.comb += old.eq(Mux(x_clear, 0, Mux(w_same, x_data,
                                               w_part.word_select(w_addr[:lo], rw))))
        m.d.sync += [x_clear.eq(w_clear), x_we.eq(w_we & ~w_clear), x_addr.eq(w_addr),
                     x_data.eq(w_data),
                     x_inc.eq(Cat(w_data == j + 1 for j in range(k))),
                     x_dec.eq(Cat(old == j + 1 for j in range(k)))]
        with m.If(x_clear):
            m.d.sync += [route.eq(0), *[size[j].eq(0) for j in range(k)]]
        with m.Elif(x_we):
            m.d.sync += route.word_select(x_addr, rw).eq(x_data)
            for j in range(k):
                inc, dec = x_inc[j], x_dec[j]
                m.d.sync += size[j].eq(Mux(inc & ~dec, size[j] + 1,
                                           Mux(dec & ~inc, size[j] - 1, size[j])))

        # N of this subtree (the whole tree at the root): a balanced adder tree in two
        # register stages, the pairs' sums and then the rest (one stage of eight counts'
        # tree was the 8-node unit's critical path).  The tree is static while barriers run.
        def tree(terms):
            while len(terms) > 1:
                terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i]
                         for i in range(0, len(terms), 2)]
            return terms[0]
        terms = [Mux(self.child_valid[j], size[j], 0) for j in range(k)] + [Const(1)]
        pairs = [Signal(range(2 * n + 2), name=f"total_part_{i}")
                 for i in range(0, len(terms), 2)]
        m.d.sync += [p.eq(tree(terms[2 * i:2 * i + 2])) for i, p in enumerate(pairs)]
        s.total = total = Signal(16)
        m.d.sync += total.eq(tree(list(pairs)))
        m.d.comb += self.total.eq(total)

        # Each slot's routed ids as a vector of flops, and the ids routed anywhere: the
        # notices' decode (_decode) and the local tree checks select one bit of these where
        # they would select a whole entry of the table and compare it.  They follow a table
        # write a cycle after it lands: writes are configuration, made while no barrier of
        # the tree runs.
        s.routed_to = [Signal(n, name=f"routed_to_{j}") for j in range(k)]
        m.d.sync += [s.routed_to[j].eq(Cat(route.word_select(x, rw) == j + 1 for x in range(n)))
                     for j in range(k)]
        s.routed_any = Signal(n)
        m.d.sync += s.routed_any.eq(Cat(route.word_select(x, rw) != 0 for x in range(n)))

        # Members of this subtree, for the abort log: routed below, or this node itself.
        # Flops, as the vectors above (the configuration is static while barriers run): the
        # id compares and the entries' tests in front of the log's write data were the
        # 64-node unit's latest pins at seed 2 of 618a409 on the 85F (node_id_q -> the
        # log's distributed RAM, 5.89 ns against 5 ns).
        s.member = Signal(n)
        m.d.sync += s.member.eq(Cat((route.word_select(i, rw) != 0) | (s.node_id == i)
                                    for i in range(n)))

    # ---- Local tree checks (registered: they are wide and the tree is static) --------------
    def _tree_checks(self, m, s):
        """Two register stages: the route entries of the configured ids and the id
        comparisons, then the checks (the tree is static; errors show 2 cycles after a change
        of the ids, 3 after a route table write, whose routed-id vectors are a register
        stage of their own)."""
        n, k, cid, valid = s.n, s.k, s.cid, self.child_valid
        node_id, parent_id, has_parent = s.node_id, self.parent_id, self.has_parent

        def routed_at(vector, x):
            return _below(x, n) & vector.bit_select(x[:s.ibits], 1)
        pairs = [(i, j) for j in range(k) for i in range(j)]
        # Whether the node's and the parent's ids are routed below, and child j's id to
        # slot j: one bit of a routed-id vector each, where an entry of the table was read
        # and compared (on the 85F, the 64-node unit's lookups of the 4-bit entries into
        # rt_parent and rt_child were among its latest pins at both seeds of 618a409:
        # 5.86 and 5.57 ns against 5 ns).
        rt_node, rt_parent = Signal(), Signal()
        # Child j's lookup in two halves, one per register stage: the part of slot j's
        # routed ids its high index bits select (and whether the id is in range), then the
        # bit its low bits select, as the notices' lookups (_boundary).  In one stage, the
        # 64:1 selection from the port was a late pin of the 64-node unit alone at seeds 2
        # and 3 of the thirty-second pass (child_id -> rt_child_ok, 5.29 ns).
        lo = s.lo
        rt_child_part = [Signal(1 << lo, name=f"rt_child_part_{j}") for j in range(k)]
        cid_low = [Signal(lo, name=f"cid_low_{j}") for j in range(k)]
        valid_q, child_is_me, same = Signal(k), Signal(k), Signal(max(len(pairs), 1))
        id_big, parent_bad = Signal(), Signal()
        m.d.sync += [
            rt_node.eq(routed_at(s.routed_any, node_id)),
            rt_parent.eq(routed_at(s.routed_any, parent_id)),
            *[rt_child_part[j].eq(Mux(_below(cid[j], n), _routed_part(s, j, cid[j]), 0))
              for j in range(k)],
            *[cid_low[j].eq(cid[j][:lo]) for j in range(k)],
            valid_q.eq(valid),
            child_is_me.eq(Cat(cid[j] == node_id for j in range(k))),
            same.eq(Cat(cid[i] == cid[j] for i, j in pairs)),
            id_big.eq(~_below(node_id, n) | (has_parent & ~_below(parent_id, n))
                      | _any(valid[j] & ~_below(cid[j], n) for j in range(k))),
            parent_bad.eq(has_parent & (parent_id == node_id)),
        ]
        s.cfg_reg = cfg_reg = Signal(BARRIER_ERROR_LAYOUT)
        m.d.sync += [
            cfg_reg.cfg_id.eq(id_big),
            cfg_reg.cfg_slot.eq(_any(~valid_q[j] & (s.size[j] != 0) for j in range(k))),
            cfg_reg.cfg_self.eq(rt_node | (valid_q & child_is_me).any()),
            cfg_reg.cfg_parent.eq(parent_bad | (has_parent & rt_parent)),
            cfg_reg.cfg_dup.eq(_any(valid_q[i] & valid_q[j] & same[x]
                                    for x, (i, j) in enumerate(pairs))),
            cfg_reg.cfg_child.eq(_any(valid_q[j] & ~rt_child_part[j].bit_select(cid_low[j], 1)
                                      for j in range(k))),
        ]
        # shadow[j]: a lower valid slot holds child j's id, so a notice from that id is taken
        # as coming from the lower slot (the first match, as a priority encoder would pick).
        # The configuration is static, so the decode stage reads this from a flop.
        s.shadow = Signal(k)
        m.d.sync += s.shadow.eq(Cat(_any(valid_q[i] & same[pairs.index((i, j))]
                                         for i in range(j)) for j in range(k)))
        s.sticky = sticky = Signal(BARRIER_ERROR_LAYOUT)   # only cfg_write, outside, notice are used
        # The gate itself is a flop, a cycle behind the checks (the tree is static while
        # barriers run): the OR of the seven flags in front of the decision was the 64-bit
        # core's path at seed 1 of the fifteenth pass (cfg_write -> decide, 7 levels, 7.81 ns).
        s.cfg_ok = Signal(init=1)
        tree_ok = ~(cfg_reg.cfg_id | cfg_reg.cfg_slot | cfg_reg.cfg_self | cfg_reg.cfg_parent
                    | cfg_reg.cfg_dup | cfg_reg.cfg_child | sticky.cfg_write)
        # The same for the root alone (the decision's gate, _control): the root's id is
        # registered with the checks, as the AC parameters' checks register it.
        s.root_ok = Signal()
        m.d.sync += [s.cfg_ok.eq(tree_ok), s.root_ok.eq(s.is_root & tree_ok)]

    # ---- The root's controls, registered -----------------------------------------------------
    def _control(self, m, s):
        """m, c, mode and sub-mode reach the decision through registers, and so do their
        checks: the thresholds the decision compares against and the checks that gate it
        always describe the same input values (those of three cycles before), so a bad m or c
        never acts, even for one cycle.  The comparisons are done a cycle ahead (_count)."""
        is_root, total, cfg_reg = s.is_root, s.total, s.cfg_reg
        m_q, c_q = Signal(16), Signal(TIME_WIDTH)
        mode_q, sub_q = Signal(BarrierMode), Signal(2)
        m.d.sync += [m_q.eq(self.m), c_q.eq(self.c), mode_q.eq(self.mode),
                     sub_q.eq(self.ac_sub.as_value())]
        in_ac_q = mode_q == BarrierMode.AC
        m.d.sync += [
            cfg_reg.m_range.eq(is_root & in_ac_q & sub_q[0] & ((m_q == 0) | (m_q > total))),
            cfg_reg.c_zero.eq(is_root & in_ac_q & sub_q[1] & (c_q == 0)),
            cfg_reg.mode.eq(is_root & ((mode_q.as_value() == 3) | (in_ac_q & (sub_q == 0)))),
        ]
        # Which rules may release, one flop each: all done; the count; the time.
        s.can_all, s.can_count, s.can_time = Signal(), Signal(), Signal()
        # Their next values, which the decision made a cycle ahead reads (_count), from four
        # flops each at most: the root with its tree checks passed (`root_ok`, loaded with
        # cfg_ok), the AC rule's sub-mode bit (registered with the parameters' checks, so
        # both still describe the same m, c and mode), and the checks of m and c.  The mode
        # check needs no term: an AC sub-mode bit set is a valid mode and sub-mode.  Seven
        # terms, the root's id among them straight from its port, were in front of the
        # decision: the 8-node unit's path alone at seed 2 of 7286a74 (has_parent -> the
        # terms -> decide, 5 levels, 5.23 ns).
        in_ac_count, in_ac_time = Signal(), Signal()
        m.d.sync += [in_ac_count.eq(in_ac_q & sub_q[0]), in_ac_time.eq(in_ac_q & sub_q[1])]
        params_ok = ~(cfg_reg.m_range | cfg_reg.c_zero)
        s.can_next = (s.root_ok, s.root_ok & in_ac_count & params_ok,
                      s.root_ok & in_ac_time & params_ok)
        m.d.sync += [flag.eq(value) for flag, value in
                     zip((s.can_all, s.can_count, s.can_time), s.can_next)]
        # m − i (i = 0..4) and N − i (i = 0..2): the count flags compare `ones` with them.
        # Both clamped to 0 .. N + 1, the range that decides against a count of 0 .. N, so
        # the compares are as wide as the count (an 18-bit signed compare was the 8-node
        # unit's critical path once the time compare had gone).
        n = s.n
        s.m_minus = [Signal(range(n + 2), name=f"m_minus_{i}") for i in range(5)]
        m.d.sync += [s.m_minus[i].eq(Mux(m_q <= i, 0, Mux(m_q > n + 1 + i, n + 1, m_q - i)))
                     for i in range(5)]
        # N − i in two register stages (N is static while barriers run): the difference and
        # its range test, then the clamp, where the compares' chains in front of the clamp
        # (a flop's reset pin) were the 64-node unit's latest pin alone at seed 2 of
        # 9418c18 (total -> the compare -> total_minus_3, 11 levels, 5.70 ns).
        s.total_minus = [Signal(range(n + 2), name=f"total_minus_{i}") for i in range(5)]
        total_out = [Signal(name=f"total_out_{i}") for i in range(5)]
        total_sub = [Signal(range(n + 2), name=f"total_sub_{i}") for i in range(5)]
        m.d.sync += [total_out[i].eq((total < i) | (total > n + i)) for i in range(5)]
        m.d.sync += [total_sub[i].eq(total - i) for i in range(5)]
        m.d.sync += [s.total_minus[i].eq(Mux(total_out[i], n + 1, total_sub[i]))
                     for i in range(5)]
        # The flags for ones = 0 (a release clears the count), in the same register stage as
        # the differences they stand for: m − i <= 0 and N − i == 0 as flops, so a release
        # loads the count flags from flops, not through a carry chain.
        s.ge_m_zero = [Signal(name=f"ge_m_zero_{i}") for i in range(3)]
        s.eq_total_zero = [Signal(name=f"eq_total_zero_{i}") for i in range(3)]
        m.d.sync += [s.ge_m_zero[i].eq(m_q <= i) for i in range(3)]
        m.d.sync += [s.eq_total_zero[i].eq(total == i) for i in range(3)]
        s.c_le = [Signal(name=f"c_le_{i}") for i in (1, 2)]     # c <= 1, c <= 2
        m.d.sync += [s.c_le[0].eq(c_q <= 1), s.c_le[1].eq(c_q <= 2)]
        # c − 3, the time counter's value in the cycle after the first count (_count).
        s.c_minus_3 = Signal(signed(TIME_WIDTH + 2))
        m.d.sync += s.c_minus_3.eq(c_q - 3)

    # ---- Receiving, stage 0: the unit's boundary register -----------------------------------
    def _boundary(self, m, s):
        """Notices are registered as they arrive, with what is decided from
        the input alone: who sent it and to whom (the id compares, or the receiver's flags
        with dst_checked), whether the subject is in range, and each slot's routed ids
        pre-selected by the subject's high index bits, so the decode that follows selects
        one of ``2**lo`` bits per slot where it selected one of ``n``.  Decoded straight
        from the port, the notice's 64:1 route lookups were the 64-node unit's latest pins
        alone at every seed of the thirty-second pass (the port -> the lookup ->
        x_count_hit, 5-6 levels, 5.27-5.77 ns).  ``start`` wipes what this stage holds as
        it wipes the decode's strobes.  ``rx.ready`` is always 1."""
        k, n, cid = s.k, s.n, s.cid
        p = self.rx.payload
        m.d.comb += self.rx.ready.eq(1)
        lo = s.lo
        s.r = r = Signal(NOTICE_LAYOUT)
        s.r_valid = Signal()
        s.r_to_me, s.r_from_parent, s.r_from_child = Signal(), Signal(), Signal(k)
        s.r_in_range = Signal()
        s.r_routed = [Signal(1 << lo, name=f"r_routed_{j}") for j in range(k)]
        # With dst_checked, the receiver in front made the id compares (flops of
        # HeaderReceiver); else they are made here, before the register: behind it they
        # were the 64-bit core's routed paths (dst -> to_me -> x_count_hit, 7.46 ns at seed
        # 1 of 59f4419; src -> the parent compare -> x_release, 7.61 ns at seed 3 of
        # 4f4fba3).
        if self._dst_checked:
            to_me, from_parent, from_child = (self.rx_to_me, self.rx_from_parent,
                                              self.rx_from_child)
        else:
            to_me = p.dst == ~s.node_id_rx_n
            from_parent = p.src == self.parent_id
            from_child = Cat(cid[j] == p.src for j in range(k))
        m.d.sync += [
            r.eq(p), s.r_valid.eq(self.rx.valid),
            s.r_to_me.eq(to_me), s.r_from_parent.eq(from_parent),
            s.r_from_child.eq(from_child),
            s.r_in_range.eq(_below(p.subject, n)),
            *[s.r_routed[j].eq(_routed_part(s, j, p.subject)) for j in range(k)],
        ]
        with m.If(self.start):
            m.d.sync += s.r_valid.eq(0)

    # ---- Receiving, stage 1: decode --------------------------------------------------------
    def _decode(self, m, s):
        """Everything about a notice or a done strobe that the configuration decides (sender,
        slot, route of the subject, kind) and its comparisons with the current state,
        registered in the cycle after it arrives (from the boundary register).  It acts one
        cycle later (_execute), which forwards what that cycle changed.  Ref: seed 004,
        figs. 9 and 11.  Nothing here ever waits; an input that comes with `start`, or sits
        in the boundary register then, is wiped by it."""
        k, ibits, lo = s.k, s.ibits, s.lo
        p = s.r
        s.seq_inc = Signal(SEQ_WIDTH, init=1)   # seq + 1, kept beside seq
        # A notice that comes with `start` is wiped by it: `start` resets the decode's
        # strobes below (a flop's reset pin) rather than gating `take` in their logic, where
        # its fan-out put it on the 64-bit core's routed path at seed 1 of 4c92990 (start ->
        # take -> x_count_hit, 5 levels, 6.2 of 7.5 ns routing).
        take = s.r_valid
        to_me = s.r_to_me
        from_parent = self.has_parent & s.r_from_parent
        s.x_valid = Signal()
        s.x_complete = Signal()         # a COMPLETE for this node
        s.x_release = Signal()          # a RELEASE for this node from its parent
        # ... and its sequence number the unit's seq of the decode cycle, or that seq + 1:
        # execute picks one by the release in between, so the release (`rel_now`, which
        # enables the send counts and flags of every slot) is one LUT from flops.  From
        # x_release and the two compares it was two, the 8-node unit's latest pins alone at
        # every seed of 7c81b75 (x_seq_now -> rel_now -> kill_head, owe, owed_any, 5.50 ns).
        s.x_rel_now = Signal()
        s.x_rel_inc = Signal()
        s.x_kill = Signal()             # a KILL for this node from its parent
        s.x_first = Signal(k)           # the sender is child slot j (the first such slot)
        s.x_from_parent = Signal()
        s.x_to_me = Signal()
        s.x_kind = Signal(BarrierNoticeKind)
        s.x_seq_now = Signal()          # seq matches the unit's seq of the decode cycle
        s.x_seq_inc = Signal()          # ... or that seq + 1 (a release in the decode cycle)
        s.x_routed = Signal(k)          # the subject is routed to slot j
        # A COMPLETE for this node that passes the tree checks (cfg_ok), from child slot j
        # with its subject routed there (x_first[j] & x_routed[j]), made here so that
        # the count's increment ORs k flops (the 64-bit core's path at seed 2 of c559aea:
        # x_first -> the slot and route AND-OR -> increment -> ge_m, 7.62 ns).
        s.x_count_hit = Signal(k)
        s.x_bit = Signal()              # the subject's bit in the decode cycle
        # Same subject as the notice then in execute, compared on the bits that index the
        # vector: a notice whose subject is out of range never counts (x_count_hit), so the
        # rest is never needed.
        s.x_same = Signal()
        # Whether a COMPLETE that hits (x_count_hit) counts is decided in execute from these
        # flops (x_seq_now, x_seq_inc, x_bit, x_same) and the forwarding from the cycle in
        # between: one 6-input function beside the OR of the hits.  Made here as two flags
        # (x_ok_other, x_ok_same), the AND of the sequence compare, the vector's bit and the
        # subject compare was the 64-node unit's latest pins alone at seed 1 of the
        # thirty-second pass (the notice -> x_ok_same, 6 levels, 5.30 ns).  The hit itself
        # stays a flop per slot: ORed here, behind the route lookup, it was 2 levels more
        # on the 64-node unit's worst path.
        s.x_subject = Signal(DEST_WIDTH)
        s.x_estimate = Signal(TIME_WIDTH)
        # The subject selects one bit per slot of the routed-id vectors (_route_table), a
        # part of each pre-selected at the boundary (_boundary): a 64:1 selection of the
        # 4-bit entry followed by the slot compares was the 64-node unit's critical path
        # (6.85 ns), and with the compares before the selection in the same cycle, its
        # routed path at seed 1 of 1fbdf10 (the table -> x_routed, x_count_hit).
        complete = take & to_me & (p.kind == BarrierNoticeKind.COMPLETE)
        complete_ok = complete & s.cfg_ok
        first = [self.child_valid[j] & s.r_from_child[j] & ~s.shadow[j] for j in range(k)]
        routed = [s.r_in_range & s.r_routed[j].bit_select(p.subject[:lo], 1) for j in range(k)]
        bit = self.vector.bit_select(p.subject[:ibits], 1)
        same = p.subject[:ibits] == s.x_subject[:ibits]
        kill = take & to_me & (p.kind == BarrierNoticeKind.KILL) & from_parent
        release = take & to_me & (p.kind == BarrierNoticeKind.RELEASE) & from_parent
        m.d.sync += [
            s.x_valid.eq(take),
            s.x_complete.eq(complete),
            s.x_count_hit.eq(Cat(complete_ok & first[j] & routed[j] for j in range(k))),
            s.x_release.eq(release),
            s.x_rel_now.eq(release & (p.seq == self.seq)),
            s.x_rel_inc.eq(release & (p.seq == s.seq_inc)),
            s.x_kill.eq(kill),
            s.x_first.eq(Cat(first)),
            s.x_from_parent.eq(from_parent),
            s.x_to_me.eq(to_me),
            s.x_kind.eq(p.kind),
            s.x_seq_now.eq(p.seq == self.seq),
            s.x_seq_inc.eq(p.seq == s.seq_inc),
            s.x_routed.eq(Cat(routed)),
            s.x_bit.eq(bit),
            s.x_same.eq(same),
            s.x_subject.eq(p.subject),
            s.x_estimate.eq(p.estimate),
        ]
        # The host's done strobe goes through this stage but not the boundary register (it
        # comes from a register of the NIC's own): a done in cycle t is decoded with the
        # notices that arrived in cycle t - 1, and a notice and a done decoded together are
        # handled as they always were.  Through the boundary register too, it made every
        # barrier a cycle longer in the NIC (the leaf's done is on the release's path).
        s.x_done = Signal()
        s.x_done_ok = Signal()          # ... and the tree checks pass
        s.x_done_now = Signal()
        s.x_done_inc = Signal()
        # Whether the done counts, for each case of the forwarding (_execute): a release in
        # between (seq + 1) or not, each with its own sequence compares and a KILL of that
        # barrier in the same cycle.  Execute chooses one of two flops where it combined
        # five (the 64-bit core's routed path at seed 3 of e49e97b: rel_last -> the KILL's
        # seq check -> the done's -> own_pending's enable, 5 levels, 7.43 ns).
        s.x_done_ok_inc = Signal()
        s.x_done_ok_now = Signal()
        done_ok = self.done & s.cfg_ok
        m.d.sync += [
            s.x_done.eq(self.done),
            s.x_done_ok.eq(done_ok),
            s.x_done_now.eq(self.done_seq == self.seq),
            s.x_done_inc.eq(self.done_seq == s.seq_inc),
            s.x_done_ok_inc.eq(done_ok & (self.done_seq == s.seq_inc)
                               & ~(kill & (p.seq == s.seq_inc))),
            s.x_done_ok_now.eq(done_ok & (self.done_seq == self.seq)
                               & ~(kill & (p.seq == self.seq))),
        ]
        with m.If(self.start):
            m.d.sync += [flag.eq(0) for flag in (s.x_valid, s.x_complete, s.x_count_hit,
                                                 s.x_release, s.x_rel_now, s.x_rel_inc,
                                                 s.x_kill, s.x_done, s.x_done_ok,
                                                 s.x_done_ok_inc, s.x_done_ok_now)]

    # ---- Receiving, stage 2: execute, and the root's decision (fig. 10) ---------------------
    def _execute(self, m, s):
        # Forwarding from the cycle in between: a release there moved seq on by one and
        # cleared the vector; a completion there may have set this notice's subject bit.
        s.rel_last = Signal()           # rel_now, registered
        s.c_new_last = Signal()         # c_new, registered
        seq_ok = Mux(s.rel_last, s.x_seq_inc, s.x_seq_now)
        done_ok = Mux(s.rel_last, s.x_done_inc, s.x_done_now)
        new_bit = Mux(s.rel_last, 1, ~s.x_bit & ~(s.x_same & s.c_new_last))
        kind = s.x_kind
        down = (kind == BarrierNoticeKind.RELEASE) | (kind == BarrierNoticeKind.KILL)
        s.well_formed = s.x_to_me & (((kind == BarrierNoticeKind.COMPLETE) & s.x_first.any())
                                     | (down & s.x_from_parent))
        s.inside = (s.x_routed & s.x_first).any()
        s.rx_stale = Signal()
        m.d.comb += s.rx_stale.eq(s.x_valid & s.well_formed & ~seq_ok)
        rel_rx = Mux(s.rel_last, s.x_rel_inc, s.x_rel_now)
        s.kill_rx = Signal()
        m.d.comb += s.kill_rx.eq(s.x_kill & seq_ok)

        # The root's decision reads only flops: the count and time flags are computed a cycle
        # ahead (see _count), so the release comes in the same cycles as a same-cycle compare
        # would give (the cycle after the count reached m or N; the cycle now = s + c).
        s.nonzero = Signal()            # ones != 0
        s.ge_m = [Signal(name=f"ge_m_{i}") for i in range(3)]       # ones + i >= m
        s.eq_total = [Signal(name=f"eq_total_{i}") for i in range(3)]   # ones + i == N
        s.time_hit = Signal()           # now − s >= c, with s recorded
        # The decision itself is a flop too (`decide`), made a cycle ahead from the flags'
        # next values (_count) and cleared with them; `decide_ref` is the same decision made
        # from the flags, which the tests compare with it every cycle (`mirrors`).  Made
        # from the flags in its cycle, it began the 64-node unit's routed critical path at
        # seed 1 of 392fc2e (eq_total -> decision -> release -> the flags, 7.07 ns).
        s.decide = Signal()
        decide_ref = Signal()
        s.early = Signal()
        m.d.comb += [
            decide_ref.eq(s.nonzero & ((s.can_all & s.eq_total[0]) | (s.can_count & s.ge_m[0])
                                       | (s.can_time & s.time_hit))),
            s.early.eq(s.decide & ~s.eq_total[0]),
        ]
        self.mirrors = [(s.decide, decide_ref), (rel_rx, s.x_release & seq_ok)]
        s.rel_now = Signal()            # this node leaves barrier `seq` in this cycle
        m.d.comb += s.rel_now.eq(rel_rx | s.decide)
        m.d.sync += s.rel_last.eq(s.rel_now)

        # Completions (figs. 8, 9).  The own bit and "aborted in this barrier" are flags kept
        # beside the vector and abort_seq (a node leaves a barrier only finished or aborted,
        # so abort_seq is seq or seq − 1 whenever `aborted` is set).  A COMPLETE is never
        # received in the cycle of a RELEASE (one notice per cycle), so only the root's
        # decision can release in its cycle.
        s.own_done = Signal()           # == vector[node_id]
        s.aborted_cur = Signal()        # == aborted & (abort_seq == seq)
        s.c_cur = s.x_complete & s.x_first.any() & seq_ok
        s.c_new = Signal()              # a COMPLETE that sets a new bit
        s.d_new = Signal()              # the host's done that sets the own bit
        # The same without the release of this cycle, for the registers a release clears
        # anyway (_leave's assignments come later and win): the count, its flags and the
        # time flag then do not wait for the root's decision.
        s.c_count = Signal()
        s.d_count = Signal()
        d_count_ref = Signal()          # the same from the done's and the KILL's flags
        self.mirrors.append((s.d_count, d_count_ref))
        s.d_stale = Signal()
        m.d.comb += [
            s.c_count.eq(s.x_count_hit.any() & seq_ok & new_bit),
            s.d_count.eq(Mux(s.rel_last, s.x_done_ok_inc, s.x_done_ok_now)
                         & ~s.aborted_cur & ~s.own_done),
            d_count_ref.eq(s.x_done_ok & done_ok & ~s.aborted_cur & ~s.own_done & ~s.kill_rx),
            s.c_new.eq(s.c_count & ~s.decide),
            s.d_new.eq(s.d_count & ~s.rel_now),
            # A done for another barrier, for one this node is aborted in (or in the cycle
            # the KILL comes), or in the cycle its barrier is released, never counts.
            s.d_stale.eq(s.x_done & (~done_ok | s.aborted_cur | s.kill_rx | s.rel_now)),
        ]
        m.d.sync += s.c_new_last.eq(s.c_new)
        s.late = s.c_cur & s.decide     # root only: the decision was taken without it
        m.d.comb += self.finished.eq(s.own_done)

    # ---- Counting completions; stamps (fig. 12: SR, MR', ER) --------------------------------
    def _count(self, m, s):
        """Every newly set bit adds one to `ones` (never a re-count).  The flags the decision
        and the stamps read (ones ≥ m, ones = N, one and two counts ahead) are computed in
        the cycle before from the registered `ones`, so no sum is compared in the cycle that
        uses it."""
        n, k, ibits, now = s.n, s.k, s.ibits, self.now
        vector, c_new, d_new = self.vector, s.c_new, s.d_new
        s.ones = ones = Signal(range(n + 1))
        s.done_in = [Signal(range(n + 1), name=f"done_in_{j}") for j in range(k)]
        s.own_pending = Signal()        # own COMPLETE still to send
        m.d.comb += self.ones.eq(ones)
        # The vector, the own bit and the owed COMPLETE take the increments without this
        # cycle's release (c_count, d_count): a release clears all three (_leave, later,
        # wins), so the root's decision is not the enable of the vector's flops (the
        # 64-node unit's path at seed 3 of 1af2a45: eq_total -> decision -> vector, 6.09 ns).
        with m.If(s.d_count):
            m.d.sync += [vector.bit_select(s.node_id[:ibits], 1).eq(1), s.own_done.eq(1)]
            with m.If(self.has_parent):
                m.d.sync += s.own_pending.eq(1)
        with m.If(s.c_count):
            m.d.sync += vector.bit_select(s.x_subject[:ibits], 1).eq(1)
        # A release clears the slot counts (_leave, later, wins), so they count without
        # waiting for the root's decision.
        for j in range(k):
            with m.If(s.c_count & s.x_first[j]):
                m.d.sync += s.done_in[j].eq(s.done_in[j] + 1)
        # The increments without the release of this cycle (see _decide): a release clears
        # `ones` and the flags below in _leave, after these assignments.
        # The sums are made from flops; the late increments only choose one of them, the
        # COMPLETE's last (it arrives later than the done strobe's, through the notice's
        # flags and the forwarding).
        def by_increment(values):
            return Mux(s.c_count, Mux(s.d_count, values[2], values[1]),
                       Mux(s.d_count, values[1], values[0]))
        m.d.sync += ones.eq(by_increment([ones, ones + 1, ones + 2]))

        # The flags of the next cycle: ones + inc + i against m and N, inc = 0, 1 or 2.
        ge = [ones >= s.m_minus[i] for i in range(5)]
        eq = [ones == s.total_minus[i] for i in range(5)]
        for i in range(3):
            m.d.sync += [
                s.ge_m[i].eq(by_increment(ge[i:i + 3])),
                s.eq_total[i].eq(by_increment(eq[i:i + 3])),
            ]
        m.d.sync += s.nonzero.eq(s.nonzero | s.c_count | s.d_count)
        # ones reaches m (m = 0: ge_m[0] is always set, no stamp) or N in this cycle.  The
        # stamps outlive a release, so they take the gated increments.
        first = ~s.nonzero & (c_new | d_new)
        new_one = c_new ^ d_new
        new_two = c_new & d_new
        reach_m = ~s.ge_m[0] & Mux(new_two, s.ge_m[2], new_one & s.ge_m[1])
        reach_n = ~s.eq_total[0] & Mux(new_two, s.eq_total[2], new_one & s.eq_total[1])
        counted_first = ~s.nonzero & (s.c_count | s.d_count)

        # Stamps of the barrier in progress, written a cycle later from a registered copy of
        # `now` (the value of the counting cycle); copied to s/mt/e when it is released.  Kept
        # by every unit; only the root's mean anything.
        s.now_last = Signal(TIME_WIDTH)
        m.d.sync += s.now_last.eq(now)
        s.hit = Signal(STAMP_FLAGS)     # stamps to write now, with now_last
        m.d.sync += [s.hit.s.eq(first), s.hit.mt.eq(reach_m), s.hit.e.eq(reach_n)]
        s.cur_s = Signal(TIME_WIDTH)
        s.cur_mt = Signal(TIME_WIDTH)
        s.cur_e = Signal(TIME_WIDTH)
        s.cur_flags = Signal(STAMP_FLAGS)
        for name in ("s", "mt", "e"):
            with m.If(s.hit[name]):
                m.d.sync += [getattr(s, f"cur_{name}").eq(s.now_last), s.cur_flags[name].eq(1)]

        # Time threshold: time_hit in cycle t + 1 is now(t + 1) − s >= c, with s the `now` of
        # the first count (cycle t0).  `now` counts cycles, so that is (t + 1 − t0) >= c: a
        # down-counter loaded while nothing is counted and decremented after, whose value in
        # cycle t >= t0 + 1 is c − 2 − (t − t0), reaches it when it turns negative (its sign
        # is a flop).  One and two cycles after the first count it is c <= 1, c <= 2.  A
        # 65-bit compare of now + 1 with s + c was here, one carry chain into time_hit (the
        # 8-node unit's critical path, 5.85 ns); the counter's chain ends in its own flops.
        # It is not held at its sign: from c − 3 it needs 2**65 cycles to wrap.
        time_left = Signal(signed(TIME_WIDTH + 2))
        m.d.sync += time_left.eq(Mux(s.nonzero, time_left - 1, s.c_minus_3))
        time_kept = Mux(s.hit.s, s.c_le[1], s.cur_flags.s & time_left[-1])
        m.d.sync += s.time_hit.eq(Mux(counted_first, s.c_le[0], time_kept))

        # The root's decision for the next cycle, from the next values of its terms: for each
        # increment, from flops (the time flag below: a first count loads c <= 1), chosen by
        # the increment like the flags (a release or a start clears it, in _clear_flags).
        # ones + i against m and N for i < 3 are the flags themselves (eq_total, ge_m hold
        # them for this cycle's `ones`), so the decision reads flops where the compares were
        # in front of it (the 64-node unit's latest pins alone at seeds 1 and 3 of the
        # thirty-second pass: total_minus -> ones == N − i -> decide, 5.32 ns).  The mirror
        # `decide_ref` checks the result every cycle.
        can_all, can_count, can_time = s.can_next
        decide_by = [
            ((s.nonzero | (i > 0)) &
             ((can_all & s.eq_total[i]) | (can_count & s.ge_m[i]) |
              (can_time & (Mux(s.nonzero, time_kept, s.c_le[0]) if i else time_kept))))
            for i in range(3)]
        m.d.sync += s.decide.eq(by_increment(decide_by))


    # ---- Forwarding completions up: a queue that cannot overflow -----------------------------
    def _queue(self, m, s):
        s.qdepth = qdepth = max(s.n, 2)
        upq = Memory(shape=unsigned(s.ibits), depth=qdepth, init=[])
        m.submodules.upq = upq
        qw = upq.write_port()
        s.qr = upq.read_port(domain="comb")
        s.q_wr = Signal(range(qdepth))
        s.q_rd = Signal(range(qdepth))
        s.q_count = Signal(range(qdepth + 1))
        # c_new without the root's decision: a node with a parent is not the root, so it
        # never decides (can_all, can_count and can_time hold is_root), and the queue's
        # write enable does not wait for the decision's terms.
        s.push = s.c_count & self.has_parent
        # The free entry at q_wr is written in every cycle the queue is not full, and a push
        # only moves q_wr past it: the write enable comes from the count's flops, not from
        # the notice's checks (the 64-node unit's path, x_first -> push -> the LUT RAM's
        # write enable, 6.13 ns).  A full queue takes no push (it cannot overflow).
        m.d.comb += [qw.addr.eq(s.q_wr), qw.data.eq(s.x_subject[:s.ibits]),
                     qw.en.eq(s.q_count != qdepth), s.qr.addr.eq(s.q_rd)]

    # ---- Kills and the abort log -------------------------------------------------------------
    def _kills_and_log(self, m, s):
        n, k, seq, early, kill_rx = s.n, s.k, self.seq, s.early, s.kill_rx
        s.killed = Signal()             # a KILL for the current seq came from the parent
        s.kill_est = Signal(TIME_WIDTH)  # the estimate the next KILLs carry
        own_kill = (kill_rx | early) & ~s.own_done
        # Only a KILL received sets aborted_cur: the root's early decision releases the
        # barrier in its own cycle, and the release clears aborted_cur (_leave, later,
        # wins), so the decision is not in front of this flop (the 64-bit core's path at
        # seed 1 of its ninth-pass commit: eq_total -> decide -> early -> aborted_cur, 5
        # LUTs, 7.52 ns).
        with m.If(kill_rx & ~s.own_done):
            m.d.sync += s.aborted_cur.eq(1)
        # The status of the abort (aborted, abort_seq, abort_estimate, read by the host) is
        # noted a cycle later, from flops: the decision enables one flop here, not the 64 of
        # abort_estimate (that fan-out ended the 8-node unit's critical path) nor the
        # sequence number.  A start in the kill's cycle clears it, as it would have; a start
        # or the host's done (_leave, later) in the cycle after wins over it, as it would
        # have over the status set a cycle earlier.
        est_q = Signal(TIME_WIDTH)
        seq_q = Signal(SEQ_WIDTH)
        note_est = Signal()
        m.d.sync += [est_q.eq(Mux(s.is_root, self.estimate, s.x_estimate)), seq_q.eq(seq),
                     note_est.eq(own_kill & ~self.start)]
        with m.If(note_est):
            m.d.sync += [self.abort_estimate.eq(est_q), self.aborted.eq(1),
                         self.abort_seq.eq(seq_q)]
        # A received KILL's estimate is taken from a copy of x_estimate made in every cycle
        # (`rx_est`, no enable) while `kill_fresh` says the KILL was the last to set it;
        # `kill_est` then loads that copy a cycle later.  The received KILL's sequence check
        # (behind the release flag) no longer enables the 64 estimate flops: it was the
        # 8-node unit's latest pin alone at seed 3 of f2f7e13 (rel_last -> the KILL's check
        # -> kill_est's enable, 5.48 ns).  `kill_est_now` is the value the old register
        # held (tests hold it to a reference register every cycle, `mirrors`).
        rx_est = Signal(TIME_WIDTH)
        kill_fresh = Signal()
        m.d.sync += [rx_est.eq(s.x_estimate), kill_fresh.eq(kill_rx & ~early & ~self.start)]
        s.kill_est_now = Mux(kill_fresh, rx_est, s.kill_est)
        with m.If(kill_rx):
            m.d.sync += s.killed.eq(1)
        with m.If(kill_fresh):
            m.d.sync += s.kill_est.eq(rx_est)
        with m.If(early):
            m.d.sync += s.kill_est.eq(self.estimate)
        kill_est_ref = Signal(TIME_WIDTH)
        with m.If(kill_rx):
            m.d.sync += kill_est_ref.eq(s.x_estimate)
        with m.If(early):
            m.d.sync += kill_est_ref.eq(self.estimate)
        with m.If(self.start):
            m.d.sync += kill_est_ref.eq(0)
        self.mirrors.append((s.kill_est_now, kill_est_ref))
        # Children that get a KILL for the barrier released now: those whose subtree is not
        # complete here, if this node was killed (or is the root releasing early).
        # Ref: seed 004, fig. 11 step s53.
        s.rel_kill = [self.child_valid[j] & (s.done_in[j] != s.size[j])
                      & Mux(s.is_root, early, s.killed) for j in range(k)]

        log_entry = data.StructLayout({"seq": SEQ_WIDTH, "ids": n})
        log = Memory(shape=log_entry, depth=self._log_depth, init=[])
        m.submodules.log = log
        lw = log.write_port()
        lr = log.read_port(domain="comb")
        s.log_ptr = Signal(range(self._log_depth))
        m.d.comb += [
            lw.addr.eq(s.log_ptr), lw.en.eq(early),
            lw.data.seq.eq(seq), lw.data.ids.eq(s.member & ~self.vector),
            lr.addr.eq(self.log_index),
            self.log_seq.eq(lr.data.seq), self.log_ids.eq(lr.data.ids),
        ]
        with m.If(early):
            m.d.sync += s.log_ptr.eq(s.log_ptr + 1)
            with m.If(self.log_count != 0xffff):
                m.d.sync += self.log_count.eq(self.log_count + 1)
            with m.If(self.log_count >= self._log_depth):
                m.d.sync += self.log_overflow.eq(1)

    # ---- Sending -------------------------------------------------------------------------------
    def _send(self, m, s):
        """Per child: RELEASEs owed (`owe`) and whether a KILL goes before the oldest of them
        (`kill_head`).  A child owed more than one RELEASE has not left the older barrier, so
        nobody below it can have finished the newer ones: each newer barrier was an early
        release that killed that subtree, and its KILL is implied.  Hence one flag suffices.

        What the tx register loads is chosen from flops only: `owed` (owe ≠ 0) and `head`
        (seq − owe, the barrier of the oldest RELEASE owed) are kept beside each count, so
        no count is compared or subtracted on the way to tx."""
        k, node_id, cid, valid = s.k, s.node_id, s.cid, self.child_valid
        s.owe = owe = [Signal(SEQ_WIDTH, name=f"owe_{j}") for j in range(k)]
        s.owed = owed = Signal(k)
        s.head = head = [Signal(SEQ_WIDTH, name=f"head_{j}") for j in range(k)]
        s.kill_head = kill_head = Signal(k)
        # The lowest slot owed something goes first: `pick` for the updates below, and the
        # payload fields through balanced priority multiplexers (log2 k levels, not k).
        # `pick` is a flop, kept with `owed` (below; `mirrors` holds it to the lowest owed
        # flag): made from the k flags, it was the front of the count and head enables,
        # the 64-bit core's one late pin at seed 2 of 466307f (owed -> 3 LUTs -> head_2's
        # enable, 6.91 ns, 6.0 of it routing) and a late pin of the 64-node unit alone.
        def lowest(flags):
            return Cat(flags[j] & ~flags[:j].any() if j else flags[0] for j in range(k))
        s.pick = pick = Signal(k)
        self.mirrors.append((pick, lowest(owed)))

        def picked(values):
            return _first(list(owed), list(values))[1]
        pick_kill = picked([kill_head[j] for j in range(k)])

        # The notices leave through a two-entry queue (tx itself and `spare`), filled while
        # `spare` is empty: the sends below and the counts they move are decided on that
        # flop, and tx.ready loads only the queue.  Decided on tx's own `~valid | ready`,
        # they were the cores' routed paths at seed 2 of 8e689a2 (256-bit: the port slice's
        # full flag -> the send -> the RELEASE counts' enables, 8.25 ns) and of fd6301c
        # placed with a placer timing weight of 30 (64-bit, 7.45 ns).  While tx moves on at
        # once the notices leave in the same cycles as before.
        spare = Signal(NOTICE_LAYOUT)
        spare_valid = Signal()
        spare_up = Signal()                             # spare holds a COMPLETE
        load = ~spare_valid
        # Whether any child is owed a notice: a flop kept beside `owed` (its next value is
        # made below from the same terms; `mirrors` holds it to owed.any()).  The OR of the
        # k flags in front of every choice of the notice was the 64-node unit's routed path
        # at seed 1 of 618a409 on the 85F (owed -> down -> the spare's subject, 6 levels,
        # 5.76 ns against 5 ns).
        s.owed_any = down = Signal()
        self.mirrors.append((down, owed.any()))
        q_any = s.q_count != 0
        send_down = load & down
        send_own = load & ~down & s.own_pending
        send_q = load & ~down & ~s.own_pending & q_any
        # The notice a push would post: its fields depend only on which kind of notice goes
        # (meaningless without a push), so each bit has a short select.
        new = Signal(NOTICE_LAYOUT)
        m.d.comb += [
            new.kind.eq(Mux(down, Mux(pick_kill, BarrierNoticeKind.KILL, BarrierNoticeKind.RELEASE),
                            BarrierNoticeKind.COMPLETE)),
            new.seq.eq(Mux(down, picked(head), self.seq)),
            new.src.eq(node_id),
            new.dst.eq(Mux(down, picked(cid), self.parent_id)),
            new.subject.eq(Mux(down, 0, Mux(s.own_pending, node_id, s.qr.data))),
            # Masked on the way out by the entry's kind, so the KILL choice (a priority
            # pick) is no select of 64 payload bits (the 64-bit core's path at seed 2 of
            # dce7502: the pick -> the spare's estimate, 7.43 ns).
            new.estimate.eq(s.kill_est_now),
        ]
        tx_q = Signal(NOTICE_LAYOUT)
        m.d.comb += [self.tx.payload.eq(tx_q),
                     self.tx.payload.estimate.eq(
                         Mux(tx_q.kind == BarrierNoticeKind.KILL, tx_q.estimate, 0))]
        push = down | s.own_pending | q_any             # with `load`, a notice is posted
        out_free = ~self.tx.valid | self.tx.ready
        with m.If(out_free):
            m.d.sync += [tx_q.eq(Mux(spare_valid, spare, new)),
                         self.tx.valid.eq(spare_valid | push), spare_valid.eq(0)]
        with m.Elif(~spare_valid):
            m.d.sync += [spare.eq(new), spare_valid.eq(push), spare_up.eq(~down)]
        # A completion still in `spare` when this node leaves its barrier is dropped with the
        # queued ones (see _leave); one already in tx goes, as it did before the queue.
        with m.If(s.rel_now & spare_valid & spare_up & ~out_free):
            m.d.sync += spare_valid.eq(0)
        with m.If(send_own):
            m.d.sync += s.own_pending.eq(0)
        with m.If(send_q):
            m.d.sync += s.q_rd.eq(Mux(s.q_rd == s.qdepth - 1, 0, s.q_rd + 1))
        with m.If(s.push):
            m.d.sync += s.q_wr.eq(Mux(s.q_wr == s.qdepth - 1, 0, s.q_wr + 1))
        q_count = s.q_count
        m.d.sync += q_count.eq(Mux(s.push, Mux(send_q, q_count, q_count + 1),
                                   Mux(send_q, q_count - 1, q_count)))

        # owe ≠ 1 per child, a flop kept beside the count (`mirrors` holds it to the compare):
        # the compare in front of the owed flags' next values was the 64-node unit's late
        # pin alone at seed 1 of the thirty-second pass (owe -> owe != 1 -> owed_any, 5.25 ns).
        s.owe_more = owe_more = Signal(k, init=(1 << k) - 1)
        owed_next = []
        for j in range(k):
            sending = send_down & pick[j]
            send_kill = sending & kill_head[j]
            send_rel = sending & ~kill_head[j]
            inc = s.rel_now & valid[j]
            more = owe_more[j]              # with owed[j]: another RELEASE after this one
            self.mirrors.append((more, owe[j] != 1))
            with m.If(send_kill):
                m.d.sync += kill_head[j].eq(0)
            with m.If(send_rel):
                # The next oldest barrier owed, if any, was killed (see above); else the one
                # released now becomes the oldest, with its own KILL flag.
                m.d.sync += kill_head[j].eq(more | (inc & s.rel_kill[j]))
            with m.Elif(inc & ~owed[j]):
                m.d.sync += kill_head[j].eq(s.rel_kill[j])
            # owe − send_rel + inc; seq − owe moves on by send_rel (seq moves by inc).
            owed_next.append(inc | (owed[j] & ~(send_rel & ~more)))
            m.d.sync += [
                owe[j].eq(Mux(send_rel, Mux(inc, owe[j], owe[j] - 1),
                              Mux(inc, owe[j] + 1, owe[j]))),
                owed[j].eq(owed_next[-1]),
                # owe − 1 ≠ 1, owe + 1 ≠ 1 (owe ≠ 0: owed), or owe ≠ 1 unchanged.
                owe_more[j].eq(Mux(send_rel & ~inc, owe[j] != 2,
                                   Mux(inc & ~send_rel, owed[j], more))),
            ]
            with m.If(send_rel):
                m.d.sync += head[j].eq(head[j] + 1)
        # Whether any child is still owed a notice next cycle, without the OR of the next
        # values: a release owes every valid child one; otherwise only a RELEASE that clears
        # the last count owed (one slot owed, that slot's oldest is no KILL and owe = 1)
        # empties the set, and whether the flags say so is made from flops alone.  As the OR
        # of `owed_next`, behind the pick and the counts, it was a late pin of the 64-node
        # unit alone at seeds 2 and 3 of the thirty-second pass (5.19 and 5.20 ns).
        two_plus = _any(owed[j] & owed[:j].any() for j in range(1, k)) if k > 1 else Const(0)
        last_clears = ~two_plus & _any(owed[j] & ~kill_head[j] & ~owe_more[j] for j in range(k))
        m.d.sync += down.eq((s.rel_now & valid.any()) | (down & ~(load & last_clears)))
        # The lowest slot owed next cycle: after a release every valid child is owed (and
        # only valid children ever are: `valid | owed` is the set); otherwise the picked
        # slot stays first unless a RELEASE clears its last count, and then the next owed
        # slot (from flops) follows.
        clears = send_down & _any(pick[j] & ~kill_head[j] & ~owe_more[j] for j in range(k))
        second = lowest(owed & ~pick)
        m.d.sync += pick.eq(Mux(s.rel_now, lowest(valid | owed), Mux(clears, second, pick)))

    # ---- Leaving a barrier ---------------------------------------------------------------------
    def _leave(self, m, s):
        seq, k = self.seq, s.k
        with m.If(s.rel_now):
            m.d.sync += [
                seq.eq(seq + 1),
                s.seq_inc.eq(s.seq_inc + 1),
                self.vector.eq(0),
                s.ones.eq(0),
                s.own_done.eq(0),
                s.aborted_cur.eq(0),
                s.killed.eq(0),
                s.own_pending.eq(0),
                # Queued completions of the old barrier are stale at the parent, which left it
                # before this node did: drop them.
                s.q_wr.eq(0), s.q_rd.eq(0), s.q_count.eq(0),
                s.cur_flags.eq(0),
                self.released.eq(1),
                self.released_at.eq(self.now),
                # A stamp due in this very cycle (see _count) is taken from now_last.
                self.s.eq(Mux(s.hit.s, s.now_last, s.cur_s)),
                self.mt.eq(Mux(s.hit.mt, s.now_last, s.cur_mt)),
                self.e.eq(Mux(s.hit.e, s.now_last, s.cur_e)),
                self.stamp_valid.eq(s.cur_flags.as_value() | s.hit.as_value()),
                self.stamp_seq.eq(seq),
                self.release_ones.eq(s.ones),
            ]
            m.d.sync += [s.done_in[j].eq(0) for j in range(k)]
            self._clear_flags(m, s)
        with m.If(s.d_new):
            m.d.sync += [self.released.eq(0), self.aborted.eq(0), s.aborted_cur.eq(0)]

    def _clear_flags(self, m, s):
        """The count and time flags for ones = 0 (in the cycle `ones` is cleared)."""
        m.d.sync += [
            s.nonzero.eq(0), s.time_hit.eq(0), s.decide.eq(0),
            *[s.ge_m[i].eq(s.ge_m_zero[i]) for i in range(3)],
            *[s.eq_total[i].eq(s.eq_total_zero[i]) for i in range(3)],
        ]

    def _errors_and_stale(self, m, s):
        sticky = s.sticky
        m.d.comb += [
            self.errors.eq(s.cfg_reg.as_value() | sticky.as_value()),
            self.error.eq(self.errors.as_value().any()),
        ]
        # What is dropped in a cycle is registered first and added a cycle later (the count
        # runs a cycle behind), so the late drop signals, which follow the root's decision,
        # end at two flops and not at a 32-bit counter's enable.  `start` drops what was
        # counted in its cycle.
        s.stale_one = one = Signal()
        s.stale_two = two = Signal()
        drops = Cat(s.rx_stale | s.late, s.d_stale)
        m.d.sync += [one.eq((drops == 0b01) | (drops == 0b10)), two.eq(drops == 0b11)]
        stale = self.stale
        m.d.sync += stale.eq(Mux(two, stale + 2, Mux(one, stale + 1, stale)))
        # A bad route write stays flagged across `start` (the table it left is still wrong)
        # until the table is cleared.
        with m.If(s.write_bad):
            m.d.sync += sticky.cfg_write.eq(1)
        with m.If(self.route_clear):
            m.d.sync += sticky.cfg_write.eq(0)
        with m.If(s.c_cur & ~s.inside):
            m.d.sync += sticky.outside.eq(1)
        with m.If(s.x_valid & ~s.well_formed):
            m.d.sync += sticky.notice.eq(1)

    # ---- start_ac_region: a clean slate (the tx queue is left to finish) ----------------------
    def _start(self, m, s):
        k = s.k
        with m.If(self.start):
            m.d.sync += [
                self.seq.eq(self.start_seq), s.seq_inc.eq(self.start_seq + 1),
                self.vector.eq(0), s.ones.eq(0), s.own_done.eq(0), s.aborted_cur.eq(0),
                s.killed.eq(0), s.kill_est.eq(0), s.own_pending.eq(0),
                s.q_wr.eq(0), s.q_rd.eq(0), s.q_count.eq(0),
                s.cur_s.eq(0), s.cur_mt.eq(0), s.cur_e.eq(0), s.cur_flags.eq(0), s.hit.eq(0),
                self.released.eq(0), self.released_at.eq(0),
                self.aborted.eq(0), self.abort_seq.eq(0), self.abort_estimate.eq(0),
                self.s.eq(0), self.mt.eq(0), self.e.eq(0), self.stamp_valid.eq(0),
                self.stamp_seq.eq(0), self.release_ones.eq(0),
                self.stale.eq(0), s.stale_one.eq(0), s.stale_two.eq(0),
                s.sticky.outside.eq(0), s.sticky.notice.eq(0),
                s.log_ptr.eq(0), self.log_count.eq(0), self.log_overflow.eq(0),
            ]
            m.d.sync += [s.done_in[j].eq(0) for j in range(k)]
            m.d.sync += [s.owe[j].eq(0) for j in range(k)]
            m.d.sync += [s.head[j].eq(self.start_seq) for j in range(k)]
            m.d.sync += [s.owed.eq(0), s.owed_any.eq(0), s.kill_head.eq(0), s.pick.eq(0),
                         s.owe_more.eq((1 << k) - 1)]
            self._clear_flags(m, s)


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
