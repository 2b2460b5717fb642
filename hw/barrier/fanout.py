"""The barrier unit's downward fan-out: per child, the RELEASEs owed and whether a KILL goes
before the oldest of them, with the flags kept beside the counts so that the notice sent is
chosen from flops."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .gates import any_of, check_int
from .layouts import MAX_CHILDREN_LIMIT, SEQ_WIDTH


__all__ = ["ReleaseFanout"]


class ReleaseFanout(wiring.Component):
    """Per child: RELEASEs owed (`owe`) and whether a KILL goes before the oldest of them
    (`kill_head`).  A child owed more than one RELEASE has not left the older barrier, so
    nobody below it can have finished the newer ones: each newer barrier was an early
    release that killed that subtree, and its KILL is implied.  Hence one flag suffices.

    What the tx register loads is chosen from flops only: `owed` (owe ≠ 0) and `head`
    (seq − owe, the barrier of the oldest RELEASE owed) are kept beside each count, so
    no count is compared or subtracted on the way to tx.

    Parameters
    ----------
    max_children : int
        Child slots (1 .. 64).

    Members
    -------
    rel_now : ``In(1)``
        The unit leaves its barrier: every valid child is owed a RELEASE.
    rel_kill : ``In(max_children)``
        The children that get a KILL for the barrier released now
        (:class:`~.kills.KillControl`).
    child_valid : ``In(max_children)``
        Which child slots hold a child.
    load : ``In(1)``
        The sender takes a notice in this cycle if one is owed (:class:`~.send.NoticeSender`):
        the lowest slot owed goes.
    start : ``In(1)``; start_seq : ``In(16)``
        The unit's start strobe: nothing is owed, and the heads are ``start_seq``.
    owed : ``Out(max_children)``; owed_any : ``Out(1)``
        Which children are owed a notice, and whether any is: flops.
    kill_head : ``Out(max_children)``
        A KILL goes before the oldest RELEASE owed.
    head : ``Out(ArrayLayout(16, max_children))``
        The barrier of the oldest RELEASE owed to each child.
    """

    def __init__(self, max_children):
        check_int("max_children", max_children, 1, MAX_CHILDREN_LIMIT)
        self._max_children = max_children
        #: (flop, the expression it stands for) pairs a test holds equal in every cycle.
        self.mirrors = []
        k = max_children
        super().__init__({
            "rel_now": In(1), "rel_kill": In(k), "child_valid": In(k), "load": In(1),
            "start": In(1), "start_seq": In(SEQ_WIDTH),
            "owed": Out(k), "owed_any": Out(1), "kill_head": Out(k),
            "head": Out(data.ArrayLayout(SEQ_WIDTH, k)),
        })

    def elaborate(self, platform):
        m = Module()
        k, valid, load = self._max_children, self.child_valid, self.load
        owe = [Signal(SEQ_WIDTH, name=f"owe_{j}") for j in range(k)]
        owed = self.owed
        head = [Signal(SEQ_WIDTH, name=f"head_{j}") for j in range(k)]
        m.d.comb += [self.head[j].eq(head[j]) for j in range(k)]
        kill_head = self.kill_head
        # The lowest slot owed something goes first: `pick` for the updates below, and the
        # payload fields through balanced priority multiplexers (log2 k levels, not k).
        # `pick` is a flop, kept with `owed` (below; `mirrors` holds it to the lowest owed
        # flag): made from the k flags, it was the front of the count and head enables,
        # the 64-bit core's one late pin at seed 2 of 466307f (owed -> 3 LUTs -> head_2's
        # enable, 6.91 ns, 6.0 of it routing) and a late pin of the 64-node unit alone.
        def lowest(flags):
            return Cat(flags[j] & ~flags[:j].any() if j else flags[0] for j in range(k))
        pick = Signal(k)
        self.mirrors.append((pick, lowest(owed)))
        # Whether any child is owed a notice: a flop kept beside `owed` (its next value is
        # made below from the same terms; `mirrors` holds it to owed.any()).  The OR of the
        # k flags in front of every choice of the notice was the 64-node unit's routed path
        # at seed 1 of 618a409 on the 85F (owed -> down -> the spare's subject, 6 levels,
        # 5.76 ns against 5 ns).
        down = self.owed_any
        self.mirrors.append((down, owed.any()))
        send_down = load & down

        # owe ≠ 1 per child, a flop kept beside the count (`mirrors` holds it to the compare):
        # the compare in front of the owed flags' next values was the 64-node unit's late
        # pin alone at seed 1 of the thirty-second pass (owe -> owe != 1 -> owed_any, 5.25 ns).
        owe_more = Signal(k, init=(1 << k) - 1)
        owed_next = []
        for j in range(k):
            sending = send_down & pick[j]
            send_kill = sending & kill_head[j]
            send_rel = sending & ~kill_head[j]
            inc = self.rel_now & valid[j]
            more = owe_more[j]              # with owed[j]: another RELEASE after this one
            self.mirrors.append((more, owe[j] != 1))
            with m.If(send_kill):
                m.d.sync += kill_head[j].eq(0)
            with m.If(send_rel):
                # The next oldest barrier owed, if any, was killed (see above); else the one
                # released now becomes the oldest, with its own KILL flag.
                m.d.sync += kill_head[j].eq(more | (inc & self.rel_kill[j]))
            with m.Elif(inc & ~owed[j]):
                m.d.sync += kill_head[j].eq(self.rel_kill[j])
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
        two_plus = any_of(owed[j] & owed[:j].any() for j in range(1, k)) if k > 1 else Const(0)
        last_clears = ~two_plus & any_of(owed[j] & ~kill_head[j] & ~owe_more[j] for j in range(k))
        m.d.sync += down.eq((self.rel_now & valid.any()) | (down & ~(load & last_clears)))
        # The lowest slot owed next cycle: after a release every valid child is owed (and
        # only valid children ever are: `valid | owed` is the set); otherwise the picked
        # slot stays first unless a RELEASE clears its last count, and then the next owed
        # slot (from flops) follows.
        clears = send_down & any_of(pick[j] & ~kill_head[j] & ~owe_more[j] for j in range(k))
        second = lowest(owed & ~pick)
        m.d.sync += pick.eq(Mux(self.rel_now, lowest(valid | owed), Mux(clears, second, pick)))

        # start_ac_region: a clean slate.
        with m.If(self.start):
            m.d.sync += [owe[j].eq(0) for j in range(k)]
            m.d.sync += [head[j].eq(self.start_seq) for j in range(k)]
            m.d.sync += [owed.eq(0), down.eq(0), kill_head.eq(0), pick.eq(0),
                         owe_more.eq((1 << k) - 1)]
        return m
