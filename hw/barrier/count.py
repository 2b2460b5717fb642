"""The barrier unit's completion count: the bit vector, ``ones`` and the flags the root's
decision reads (computed a cycle ahead), the time threshold's counter, the stamps (fig. 12:
SR, MR', ER) and the status a release leaves."""

from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .decode import decoded_layout
from .gates import check_int, index_bits
from .layouts import MAX_CHILDREN_LIMIT, MAX_NODES_LIMIT, SEQ_WIDTH, STAMP_FLAGS, TIME_WIDTH
from ..net.packet import DEST_WIDTH


__all__ = ["CompletionCounter"]


class CompletionCounter(wiring.Component):
    """Counting completions; stamps (fig. 12: SR, MR', ER); leaving a barrier.

    Parameters
    ----------
    max_nodes : int
        Width of the bit vector (1 .. 4096).
    max_children : int
        Child slots (1 .. 64).

    Members
    -------
    now : ``In(64)``
        The NIC's cycle counter.
    node_id : ``In(16)``
        This node's id, registered (the unit's ``node_id_q``).
    x : ``In(decoded_layout(max_children))``
        The decoded notice (its subject and sender slot).
    c_count, d_count, c_new, d_new, rel_now : ``In(1)``
        :class:`~.execute.ExecuteStage`'s members of those names.
    start : ``In(1)``; seq : ``In(16)``
        The unit's start strobe and its sequence number.
    m_minus, total_minus, ge_m_zero, eq_total_zero, c_le, c_minus_3
        :class:`~.checks.ConfigChecks`'s members of those names.
    can_all_next, can_count_next, can_time_next
        :class:`~.checks.ConfigChecks`'s members of those names.
    vector : ``Out(max_nodes)``; own_done : ``Out(1)``; ones : ``Out(16)``
        The completion bit vector, this node's bit of it, its ones.
    done_in : ``Out(ArrayLayout(range(max_nodes + 1), max_children))``
        Completions counted from each child slot in this barrier.
    nonzero, decide, time_hit : ``Out(1)``; ge_m, eq_total : ``Out(3)``
        ones != 0; the root's decision for this cycle; now − s >= c; ones + i >= m and
        ones + i == N (i = 0..2): flops.
    released, released_at, s, mt, e, stamp_valid, stamp_seq, release_ones
        The unit's status members of those names (flops).
    """

    def __init__(self, max_nodes, max_children):
        check_int("max_nodes", max_nodes, 1, MAX_NODES_LIMIT)
        check_int("max_children", max_children, 1, MAX_CHILDREN_LIMIT)
        self._max_nodes = max_nodes
        self._max_children = max_children
        n, k = max_nodes, max_children
        super().__init__({
            "now": In(TIME_WIDTH),
            "node_id": In(DEST_WIDTH),
            "x": In(decoded_layout(k)),
            "c_count": In(1), "d_count": In(1), "c_new": In(1), "d_new": In(1),
            "rel_now": In(1), "start": In(1), "seq": In(SEQ_WIDTH),
            "m_minus": In(data.ArrayLayout(range(n + 2), 5)),
            "total_minus": In(data.ArrayLayout(range(n + 2), 5)),
            "ge_m_zero": In(3), "eq_total_zero": In(3), "c_le": In(2),
            "c_minus_3": In(signed(TIME_WIDTH + 2)),
            "can_all_next": In(1), "can_count_next": In(1), "can_time_next": In(1),
            "vector": Out(n),
            "own_done": Out(1),
            "ones": Out(16),
            "done_in": Out(data.ArrayLayout(range(n + 1), k)),
            "nonzero": Out(1), "decide": Out(1), "time_hit": Out(1),
            "ge_m": Out(3), "eq_total": Out(3),
            "released": Out(1),
            "released_at": Out(TIME_WIDTH),
            "s": Out(TIME_WIDTH),
            "mt": Out(TIME_WIDTH),
            "e": Out(TIME_WIDTH),
            "stamp_valid": Out(STAMP_FLAGS),
            "stamp_seq": Out(SEQ_WIDTH),
            "release_ones": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        c = self._count(m)
        self._leave(m, c)
        self._start(m, c)
        return m

    # ---- Counting completions; stamps (fig. 12: SR, MR', ER) --------------------------------
    def _count(self, m):
        """Every newly set bit adds one to `ones` (never a re-count).  The flags the decision
        and the stamps read (ones ≥ m, ones = N, one and two counts ahead) are computed in
        the cycle before from the registered `ones`, so no sum is compared in the cycle that
        uses it.  Returns the registers a release or a start clears."""
        n, k, now = self._max_nodes, self._max_children, self.now
        ibits, _ = index_bits(n)
        vector, c_new, d_new = self.vector, self.c_new, self.d_new
        c_count, d_count = self.c_count, self.d_count
        ones = Signal(range(n + 1))
        done_in = [Signal(range(n + 1), name=f"done_in_{j}") for j in range(k)]
        ge_m = [Signal(name=f"ge_m_{i}") for i in range(3)]       # ones + i >= m
        eq_total = [Signal(name=f"eq_total_{i}") for i in range(3)]   # ones + i == N
        m.d.comb += [self.ones.eq(ones), *[self.done_in[j].eq(done_in[j]) for j in range(k)],
                     self.ge_m.eq(Cat(ge_m)), self.eq_total.eq(Cat(eq_total))]
        # The vector, the own bit and the owed COMPLETE (NoticeSender's own_pending) take the
        # increments without this cycle's release (c_count, d_count): a release clears all
        # three (later, wins), so the root's decision is not the enable of the vector's flops
        # (the 64-node unit's path at seed 3 of 1af2a45: eq_total -> decision -> vector,
        # 6.09 ns).
        with m.If(d_count):
            m.d.sync += [vector.bit_select(self.node_id[:ibits], 1).eq(1), self.own_done.eq(1)]
        with m.If(c_count):
            m.d.sync += vector.bit_select(self.x.subject[:ibits], 1).eq(1)
        # A release clears the slot counts (_leave, later, wins), so they count without
        # waiting for the root's decision.
        for j in range(k):
            with m.If(c_count & self.x.first[j]):
                m.d.sync += done_in[j].eq(done_in[j] + 1)
        # The increments without the release of this cycle (see ExecuteStage): a release
        # clears `ones` and the flags below in _leave, after these assignments.
        # The sums are made from flops; the late increments only choose one of them, the
        # COMPLETE's last (it arrives later than the done strobe's, through the notice's
        # flags and the forwarding).
        def by_increment(values):
            return Mux(c_count, Mux(d_count, values[2], values[1]),
                       Mux(d_count, values[1], values[0]))
        m.d.sync += ones.eq(by_increment([ones, ones + 1, ones + 2]))

        # The flags of the next cycle: ones + inc + i against m and N, inc = 0, 1 or 2.
        ge = [ones >= self.m_minus[i] for i in range(5)]
        eq = [ones == self.total_minus[i] for i in range(5)]
        for i in range(3):
            m.d.sync += [
                ge_m[i].eq(by_increment(ge[i:i + 3])),
                eq_total[i].eq(by_increment(eq[i:i + 3])),
            ]
        nonzero = self.nonzero
        m.d.sync += nonzero.eq(nonzero | c_count | d_count)
        # ones reaches m (m = 0: ge_m[0] is always set, no stamp) or N in this cycle.  The
        # stamps outlive a release, so they take the gated increments.
        first = ~nonzero & (c_new | d_new)
        new_one = c_new ^ d_new
        new_two = c_new & d_new
        reach_m = ~ge_m[0] & Mux(new_two, ge_m[2], new_one & ge_m[1])
        reach_n = ~eq_total[0] & Mux(new_two, eq_total[2], new_one & eq_total[1])
        counted_first = ~nonzero & (c_count | d_count)

        # Stamps of the barrier in progress, written a cycle later from a registered copy of
        # `now` (the value of the counting cycle); copied to s/mt/e when it is released.  Kept
        # by every unit; only the root's mean anything.
        now_last = Signal(TIME_WIDTH)
        m.d.sync += now_last.eq(now)
        hit = Signal(STAMP_FLAGS)       # stamps to write now, with now_last
        m.d.sync += [hit.s.eq(first), hit.mt.eq(reach_m), hit.e.eq(reach_n)]
        cur = {"s": Signal(TIME_WIDTH, name="cur_s"), "mt": Signal(TIME_WIDTH, name="cur_mt"),
               "e": Signal(TIME_WIDTH, name="cur_e")}
        cur_flags = Signal(STAMP_FLAGS)
        for name in ("s", "mt", "e"):
            with m.If(hit[name]):
                m.d.sync += [cur[name].eq(now_last), cur_flags[name].eq(1)]

        # Time threshold: time_hit in cycle t + 1 is now(t + 1) − s >= c, with s the `now` of
        # the first count (cycle t0).  `now` counts cycles, so that is (t + 1 − t0) >= c: a
        # down-counter loaded while nothing is counted and decremented after, whose value in
        # cycle t >= t0 + 1 is c − 2 − (t − t0), reaches it when it turns negative (its sign
        # is a flop).  One and two cycles after the first count it is c <= 1, c <= 2.  A
        # 65-bit compare of now + 1 with s + c was here, one carry chain into time_hit (the
        # 8-node unit's critical path, 5.85 ns); the counter's chain ends in its own flops.
        # It is not held at its sign: from c − 3 it needs 2**65 cycles to wrap.
        time_left = Signal(signed(TIME_WIDTH + 2))
        m.d.sync += time_left.eq(Mux(nonzero, time_left - 1, self.c_minus_3))
        time_kept = Mux(hit.s, self.c_le[1], cur_flags.s & time_left[-1])
        m.d.sync += self.time_hit.eq(Mux(counted_first, self.c_le[0], time_kept))

        # The root's decision for the next cycle, from the next values of its terms: for each
        # increment, from flops (the time flag below: a first count loads c <= 1), chosen by
        # the increment like the flags (a release or a start clears it, in _clear_flags).
        # ones + i against m and N for i < 3 are the flags themselves (eq_total, ge_m hold
        # them for this cycle's `ones`), so the decision reads flops where the compares were
        # in front of it (the 64-node unit's latest pins alone at seeds 1 and 3 of the
        # thirty-second pass: total_minus -> ones == N − i -> decide, 5.32 ns).  The mirror
        # `decide_ref` checks the result every cycle.
        can_all, can_count, can_time = self.can_all_next, self.can_count_next, self.can_time_next
        decide_by = [
            ((nonzero | (i > 0)) &
             ((can_all & eq_total[i]) | (can_count & ge_m[i]) |
              (can_time & (Mux(nonzero, time_kept, self.c_le[0]) if i else time_kept))))
            for i in range(3)]
        m.d.sync += self.decide.eq(by_increment(decide_by))
        return SimpleNamespace(ones=ones, done_in=done_in, ge_m=ge_m, eq_total=eq_total,
                               now_last=now_last, hit=hit, cur=cur, cur_flags=cur_flags)

    # ---- Leaving a barrier ---------------------------------------------------------------------
    def _leave(self, m, c):
        with m.If(self.rel_now):
            m.d.sync += [
                self.vector.eq(0),
                c.ones.eq(0),
                self.own_done.eq(0),
                c.cur_flags.eq(0),
                self.released.eq(1),
                self.released_at.eq(self.now),
                # A stamp due in this very cycle (see _count) is taken from now_last.
                self.s.eq(Mux(c.hit.s, c.now_last, c.cur["s"])),
                self.mt.eq(Mux(c.hit.mt, c.now_last, c.cur["mt"])),
                self.e.eq(Mux(c.hit.e, c.now_last, c.cur["e"])),
                self.stamp_valid.eq(c.cur_flags.as_value() | c.hit.as_value()),
                self.stamp_seq.eq(self.seq),
                self.release_ones.eq(c.ones),
            ]
            m.d.sync += [c.done_in[j].eq(0) for j in range(self._max_children)]
            self._clear_flags(m, c)
        with m.If(self.d_new):
            m.d.sync += self.released.eq(0)

    def _clear_flags(self, m, c):
        """The count and time flags for ones = 0 (in the cycle `ones` is cleared)."""
        m.d.sync += [
            self.nonzero.eq(0), self.time_hit.eq(0), self.decide.eq(0),
            *[c.ge_m[i].eq(self.ge_m_zero[i]) for i in range(3)],
            *[c.eq_total[i].eq(self.eq_total_zero[i]) for i in range(3)],
        ]

    # ---- start_ac_region: a clean slate ------------------------------------------------------
    def _start(self, m, c):
        with m.If(self.start):
            m.d.sync += [
                self.vector.eq(0), c.ones.eq(0), self.own_done.eq(0),
                c.cur["s"].eq(0), c.cur["mt"].eq(0), c.cur["e"].eq(0), c.cur_flags.eq(0),
                c.hit.eq(0),
                self.released.eq(0), self.released_at.eq(0),
                self.s.eq(0), self.mt.eq(0), self.e.eq(0), self.stamp_valid.eq(0),
                self.stamp_seq.eq(0), self.release_ones.eq(0),
            ]
            m.d.sync += [c.done_in[j].eq(0) for j in range(self._max_children)]
            self._clear_flags(m, c)
