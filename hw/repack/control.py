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

The tree joins its parts, each a component of its own module, in the order data flows through
them: the order writes (:mod:`.control_orders`), the start's registers and the list walks
(:mod:`.control_setup`), the registrations (:mod:`.control_registrations`), the unit events
(:mod:`.control_events`), the state machine (:mod:`.control_states`), the scan
(:mod:`.control_scan`), the assignment (:mod:`.control_assign`), RUN's actions
(:mod:`.control_run`), the notice queue (:mod:`.control_notices`), the watchdog
(:mod:`.control_watchdog`) and the counters (:mod:`.control_counters`); it holds the small
memories they share.
"""

from types import SimpleNamespace

from amaranth.hdl import Cat, Module
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..params import check_data_width
from .control_assign import PairAssign
from .control_counters import ControlCounters
from .control_events import EventIntake
from .control_notices import NoticeQueue
from .control_orders import OrderWriter, list_entry_layout
from .control_registrations import Registrations
from .control_run import RunActions, rank_counts_layout
from .control_scan import PairScan
from .control_setup import ControlSetup, group_layout
from .control_states import CONTROL_STATES, ControlStates, check_tree
from .control_watchdog import ControlWatchdog
from .formats import (NOTICE_LAYOUT, ORDER_WRITE_LAYOUT, REGISTRATION_LAYOUT, START_LAYOUT,
                      UNIT_EVENT_LAYOUT, RepackError, _check_capacity, unit_config_layout)


__all__ = ["RepackControl"]


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
        self._parts = None
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
        check_tree(max_ranks, units, max_group)
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

    @property
    def state_mirrors(self):
        """(flop, the expression it stands for) pairs, which a test holds equal in every
        cycle (built by elaboration): `running_q` against the OR of the running states, the
        flags that end CLEAR, CLEAR_PAIRS, GATHER and SEND against their compares (where
        they are read), and RUN's AND-ORs of flops against its priorities' choices."""
        # The compares that end CLEAR, CLEAR_PAIRS, GATHER and SEND, as flops loaded with
        # the counters they compare (`i == n_last`, `sa == p_last`, `sb == q_last`,
        # `left == 1`): a compare between the state decode and the next state was a level of
        # the control state's next-state logic, the 64-bit core's routed path at every seed
        # of 63d5359 (control_state -> ... -> control_state, 6 levels, 8.06 to 8.51 ns).
        # Tests check each against its compare in the states that read it.
        p = self._parts
        return [
            (p.run.running_q, Cat(p.states.st_run, p.states.st_gather, p.states.st_configure,
                                  p.states.st_send).any()),
            (p.setup.i_last & p.states.st_clear,
             (p.setup.i == p.setup.n_last) & p.states.st_clear),
            (p.scan.sa_last & p.states.st_clear_pairs,
             (p.scan.sa == p.setup.p_last) & p.states.st_clear_pairs),
            (p.scan.sb_last & p.states.st_clear_pairs,
             (p.scan.sb == p.setup.q_last) & p.states.st_clear_pairs),
            *p.assign.mirrors, *p.run.mirrors,
        ]

    @property
    def state_count(self):
        """How many state flags are set: 1 in every cycle (tests check it)."""
        states = self._parts.states
        return sum(getattr(states, f"st_{state.lower()}") for state in CONTROL_STATES)

    def elaborate(self, platform):
        m = Module()
        R, K, G = self._max_ranks, self._units, self._max_group
        ports = self._memories(m)
        # The parts, in the order data flows through them (the netlist's order moves ABC's
        # mapping).
        p = self._parts = SimpleNamespace()
        m.submodules.orders = p.orders = OrderWriter(R)
        m.submodules.setup = p.setup = ControlSetup(R, G, self._data_width, self._capacity)
        m.submodules.registrations = p.registrations = Registrations(R)
        m.submodules.events = p.events = EventIntake(R, K)
        m.submodules.states = p.states = ControlStates(R, K)
        m.submodules.scan = p.scan = PairScan(R, K)
        m.submodules.assign = p.assign = PairAssign(R, K, G)
        m.submodules.run = p.run = RunActions(R, K)
        m.submodules.notices = p.notices = NoticeQueue(R, K, G)
        m.submodules.watchdog = p.watchdog = ControlWatchdog(K)
        m.submodules.counters = p.counters = ControlCounters()

        # The streams.
        wiring.connect(m, wiring.flipped(self.order), p.orders.order)
        wiring.connect(m, wiring.flipped(self.start), p.setup.start)
        wiring.connect(m, wiring.flipped(self.reg), p.registrations.reg)
        wiring.connect(m, p.notices.notice, wiring.flipped(self.notice))
        for k in range(K):
            wiring.connect(m, p.assign.unit_cfg(k), wiring.flipped(self.unit_cfg(k)))
            wiring.connect(m, wiring.flipped(self.unit_event(k)),
                           getattr(p.events, f"unit_event_{k}"))
        # Every other port of a part is driven by the output of the same name: another
        # part's, a memory read port's data, or one of the tree's own ports.
        sources = {
            "order_valid": self.order.valid, "order_index": self.order.payload.index,
            "start_valid": self.start.valid,
            "reg_valid": self.reg.valid, "reg_ready": self.reg.ready,
            "notice_valid": self.notice.valid, "notice_ready": self.notice.ready,
            "unit_active": self.unit_active,
        }
        sinks = []
        for name, port in ports.items():
            if name.endswith("_data") and not name.endswith("_w_data"):
                sources[name] = port
            else:
                sinks.append((name, port))
        for part in vars(p).values():
            for name, member in part.signature.members.items():
                if not member.is_port:
                    continue
                if member.flow == Out:
                    if name in sources:
                        raise NameError(f"Two parts drive {name!r}")
                    sources[name] = getattr(part, name)
                else:
                    sinks.append((name, getattr(part, name)))
        for name, port in sinks:
            m.d.comb += port.eq(sources[name])
        c = p.counters
        m.d.comb += [self.busy.eq(c.busy), self.status.eq(c.status), self.errors.eq(c.errors),
                     self.last_error.eq(c.last_error), self.cycles.eq(c.cycles),
                     self.ops.eq(c.ops)]
        return m

    def _memories(self, m):
        """Small memories (distributed RAM), one per owner, so that each read port has one
        address register and each write port at most two writers in different states.
        Returns their ports' signals by name: ``<port>_addr`` and ``<port>_data`` of a read
        port, ``<port>_en``, ``<port>_addr`` and ``<port>_data`` of a write port."""
        R, RB = self._max_ranks, (self._max_ranks - 1).bit_length()
        ports = {}

        def memory(name, shape, writer, readers, depth=R):
            m.submodules[name] = mem = Memory(shape=shape, depth=depth, init=[])
            w = mem.write_port()
            ports.update({f"{writer}_en": w.en, f"{writer}_addr": w.addr,
                          f"{writer}_data": w.data})
            for reader in readers:
                r = mem.read_port(domain="comb")
                ports.update({f"{reader}_addr": r.addr, f"{reader}_data": r.data})

        # Rank lists: written by order writes; read by the checks, GATHER and SEND, always at
        # the address in src_ra / dst_ra (two read ports would be merged behind a mux).
        memory("src_list", list_entry_layout(), "src_w", ["src_r"])
        memory("dst_list", list_entry_layout(), "dst_w", ["dst_r"])
        # Per rank: seen by the list checks, its groups, registered, its notices so far.
        memory("seen", 1, "seen_w", ["seen_r"])
        memory("rank_sgrp", RB, "sgrp_w", ["sgrp_r"])
        memory("rank_dgrp", RB, "dgrp_w", ["dgrp_r"])
        memory("registered", 1, "regd_w", ["regd_r"])
        memory("rank_counts", rank_counts_layout(R), "cnt_w", ["cnt_r"])
        # Per group: first list entry and size (for the assignment), members not yet
        # registered (0: the group is ready).
        memory("src_groups", group_layout(R), "gs_w", ["gs_scan"])
        memory("dst_groups", group_layout(R), "gd_w", ["gd_scan"])
        memory("src_left", range(R + 1), "sleft_w", ["sleft_r", "sleft_scan"])
        memory("dst_left", range(R + 1), "dleft_w", ["dleft_r", "dleft_scan"])
        memory("pairs", 1, "pair_w", ["pair_r"], R * R)
        return ports
