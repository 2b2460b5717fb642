# Ref: seed 004 (Fujitsu, US11487593 family; /work/shared/seeds/004_*.txt), fig. 2: the nodes
#      form a tree and exchange completion and forced-abort notices along its links.
"""BarrierTreeTop: N barrier units joined by a small notice network, for standalone benches.

The top holds ``units`` :class:`~nicoll.hw.barrier.BarrierUnit` instances, a shared 64-bit
cycle counter (``now``, every unit's time base), and a notice network:

- **Links.**  Each unit's ``tx`` enters a pipeline of ``latency`` registers (L = 0: a wire);
  its head is delivered to the unit whose *index* equals the notice's ``dst``, if the sender
  has a link to it.  With ``links=None`` every unit has a link to every other one (a full
  crossbar, so one build runs any tree of up to ``units`` nodes); with a
  :class:`~nicoll.hw.tree.BarrierTree` only its parent–child pairs are linked, in both
  directions, which keeps a big tree small.  A notice for no linked unit is dropped and
  counted in ``misrouted``.  A notice offered on ``tx`` in cycle u is taken by the receiver's
  ``rx`` at the end of cycle u + L when nothing holds it up.
- **Arbitration.**  A receiver takes one notice per cycle: an injected one first
  (``inject_valid``/``inject_to``/``inject``, for malformed-notice tests), then the linked
  sender with the lowest index.  A sender whose head is not taken stalls its whole pipeline
  (and its ``tx``); per-link order is kept.
- **Random pauses.**  ``pause_rate`` / 256 is the chance that a sender's link refuses a
  notice in a cycle (``tx`` backpressure); ``gap_rate`` / 256 the chance that a receiver takes
  no linked notice in a cycle.  Both come from per-unit LFSRs, so no per-cycle input is
  needed.  0 (the default) means never.
- **Counters.**  Each delivered notice is counted by kind on its tree link, judged by the
  units' configured parents: ``down_count[i][kind]`` counts notices unit i's parent delivered
  to unit i (KILL and RELEASE go down), ``up_count[i][kind]`` notices unit i delivered to its
  parent (COMPLETE goes up); a delivery between two units neither of which is the other's
  parent counts in ``off_tree``.  32 bits each, wrapping.
- **Done strobes.**  Unit i is told ``done`` with ``done_seq`` directly (``done[i]``,
  ``done_seq[i]``) or by two timers: in the cycle ``now == at_a[i]`` it gets ``done(seq_a[i])``,
  in the cycle ``now == at_b[i]`` ``done(seq_b[i])``.  A timer at 0 is off.  The direct strobe
  goes before timer a, timer a before timer b; a strobe lost that way counts in ``clash``.
  A bench writes the times once and waits on ``Timer``s instead of driving every cycle.
- **Registered inputs and reset.**  Every input except the timers' times, ``watch_mask``
  and ``watch_seq`` passes one register before it acts, so an input written in cycle t takes
  effect in cycle t + 1 (a direct ``done`` or an ``inject`` written in cycle t reaches the
  unit in cycle t + 1; the log entry ``log_index`` selects shows in cycle t + 1).  Timer
  times must be written at least two cycles ahead.  Everything runs in a local clock domain
  whose reset is ``rst`` registered once, so it leaves reset one cycle after ``rst`` falls.
  Nothing then depends combinationally on a top-level input but a few comparators, which
  keeps the Verilator model from evaluating the units again whenever the bench writes.

Every per-unit port is an array over the units, index i = unit i (``ArrayLayout``; flattened
into one Verilog vector, unit 0 in the low bits).  Configuration (``node_id``, ``parent_id``,
``has_parent``, ``child_id``, ``child_valid``, route table writes) and status come straight
from the units; see docs/barrier.md.  The control inputs (``mode``, ``ac_sub``, ``m``, ``c``,
``estimate``, ``start``, ``start_seq``, ``log_index``) go to every unit; only the root's use
``mode``, ``m``, ``c`` and ``estimate``.  ``watch_all`` is 1 while every unit selected by
``watch_mask`` has ``seq == watch_seq``: a bench waits on its rising edge for a release to
reach every node.  ``busy`` is 1 while any notice is on a ``tx`` or inside a link.

:mod:`.barrier_tree_verilog` converts a top to Verilog for the cocotb bench.
"""

from amaranth.hdl import (
    Cat, ClockDomain, ClockSignal, Const, DomainRenamer, Instance, Module, Mux, ResetSignal,
    Signal, Value,
)
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..tree import BarrierTree
from ..barrier.unit import (
    AcSubMode, BarrierMode, BarrierUnit, BARRIER_ERROR_LAYOUT, MAX_CHILDREN_LIMIT, MAX_NODES_LIMIT,
    NOTICE_LAYOUT, SEQ_WIDTH, STAMP_FLAGS, TIME_WIDTH,
)
from ..net.packet import DEST_WIDTH


__all__ = ["MAX_UNITS", "FULL_LINKS_LIMIT", "MAX_LATENCY", "COUNT_WIDTH", "BarrierTreeTop"]

#: Most units one top holds.
MAX_UNITS = 256
#: Most units a full crossbar (``links=None``) joins: it grows with the square.
FULL_LINKS_LIMIT = 32
#: Largest per-link latency, in cycles.
MAX_LATENCY = 16
#: Width of the link, misroute and off-tree counters.
COUNT_WIDTH = 32


def _check_int(name, value, low, high):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, not {value!r}")


def _lfsr_seed(index, salt):
    # Distinct nonzero 16-bit seeds per unit and per use.
    return ((index * 2 + salt) * 0x9E37 + 0xACE1) & 0xFFFF or 1


def _lfsr_next(state):
    # Galois LFSR, x^16 + x^14 + x^13 + x^11 + 1 (maximal length).
    return Mux(state[0], (state >> 1) ^ 0xB400, state >> 1)


class BarrierTreeTop(wiring.Component):
    """``units`` barrier units, a cycle counter and a notice network; see the module docs.

    Parameters
    ----------
    units : int
        Number of units (1 .. :data:`MAX_UNITS`); unit i is meant to be node i.
    max_children : int
        Child slots of every unit (1 .. 64).
    max_nodes : int or None
        Bit-vector width of every unit (``units`` .. 4096); default ``units``.
    latency : int
        Registers on every link, L (0 .. :data:`MAX_LATENCY`); a tree hop costs L + 2 cycles.
    links : BarrierTree or None
        The only parent–child pairs that are linked, or None for a full crossbar (at most
        :data:`FULL_LINKS_LIMIT` units).
    log_depth : int
        Abort-log entries of every unit (see :class:`~nicoll.hw.barrier.BarrierUnit`).
    unit_module : str or None
        None: the units are submodules (Amaranth simulation, synthesis).  A name: each unit
        is an ``Instance`` of that Verilog module, whose source is ``unit_prototype``
        converted under that name (what :func:`~.barrier_tree_verilog.barrier_tree_verilog`
        does), so the Verilog holds one unit module instantiated ``units`` times instead of
        ``units`` copies, and Verilator compiles it once.
    """

    def __init__(self, units, *, max_children=2, max_nodes=None, latency=1, links=None,
                 log_depth=16, unit_module=None):
        _check_int("units", units, 1, MAX_UNITS)
        _check_int("max_children", max_children, 1, MAX_CHILDREN_LIMIT)
        if max_nodes is None:
            max_nodes = units
        _check_int("max_nodes", max_nodes, units, MAX_NODES_LIMIT)
        _check_int("latency", latency, 0, MAX_LATENCY)
        if links is None:
            if units > FULL_LINKS_LIMIT:
                raise ValueError(f"a full crossbar joins at most {FULL_LINKS_LIMIT} units, not "
                                 f"{units!r}; pass links=BarrierTree(...)")
            self._targets = [[r for r in range(units) if r != s] for s in range(units)]
        elif isinstance(links, BarrierTree):
            if len(links) != units:
                raise ValueError(f"links must be a tree of {units} nodes, not {links!r}")
            if links.max_children > max_children:
                raise ValueError(f"links has a node with {links.max_children} children, more "
                                 f"than max_children = {max_children!r}")
            self._targets = [sorted(links.children(s)
                                    + ([] if links.parent(s) is None else [links.parent(s)]))
                             for s in range(units)]
        else:
            raise TypeError(f"links must be None or a BarrierTree, not {links!r}")
        self._n_units = units
        self._max_children = max_children
        self._max_nodes = max_nodes
        self._latency = latency
        self._links = links
        # The units check log_depth too, but only after one has been made (and left unused).
        if not isinstance(log_depth, int) or isinstance(log_depth, bool):
            raise TypeError(f"log_depth must be an integer, not {log_depth!r}")
        if log_depth < 16 or log_depth > 1024 or log_depth & (log_depth - 1):
            raise ValueError(f"log_depth must be a power of two between 16 and 1024, "
                             f"not {log_depth!r}")
        if unit_module is not None and not isinstance(unit_module, str):
            raise TypeError(f"unit_module must be None or a module name, not {unit_module!r}")
        self._unit_module = unit_module
        if unit_module is None:
            self.unit_prototype = None
            self.units = [BarrierUnit(max_nodes, max_children, log_depth=log_depth)
                          for _ in range(units)]
        else:
            # The units' ports only, as interfaces; the logic is the prototype's module.
            self.unit_prototype = BarrierUnit(max_nodes, max_children, log_depth=log_depth)
            self.units = [self.unit_prototype.signature.create(path=(f"unit{i}",))
                          for i in range(units)]
        unit = self.unit_prototype or self.units[0]
        rw = unit.route_width
        self._log_depth = unit.log_depth

        def each(shape):
            return data.ArrayLayout(shape, units)

        super().__init__({
            "now": Out(TIME_WIDTH),
            # configuration, per unit
            "node_id": In(each(DEST_WIDTH)),
            "parent_id": In(each(DEST_WIDTH)),
            "has_parent": In(units),
            "child_id": In(each(data.ArrayLayout(DEST_WIDTH, max_children))),
            "child_valid": In(each(max_children)),
            "route_we": In(units),
            "route_addr": In(each(DEST_WIDTH)),
            "route_data": In(each(rw)),
            "route_rdata": Out(each(rw)),
            "route_clear": In(1),
            # control, to every unit
            "mode": In(BarrierMode),
            "ac_sub": In(AcSubMode, init=AcSubMode.COUNT),
            "m": In(16),
            "c": In(TIME_WIDTH),
            "estimate": In(TIME_WIDTH),
            "start": In(1),
            "start_seq": In(SEQ_WIDTH),
            "log_index": In(range(self._log_depth)),
            # done strobes, per unit
            "done": In(units),
            "done_seq": In(each(SEQ_WIDTH)),
            "at_a": In(each(TIME_WIDTH)),
            "seq_a": In(each(SEQ_WIDTH)),
            "at_b": In(each(TIME_WIDTH)),
            "seq_b": In(each(SEQ_WIDTH)),
            "clash": Out(16),
            # network
            "pause_rate": In(8),
            "gap_rate": In(8),
            "inject_valid": In(1),
            "inject_to": In(DEST_WIDTH),
            "inject": In(NOTICE_LAYOUT),
            "misrouted": Out(COUNT_WIDTH),
            "down_count": Out(each(data.ArrayLayout(COUNT_WIDTH, 4))),
            "up_count": Out(each(data.ArrayLayout(COUNT_WIDTH, 4))),
            "off_tree": Out(COUNT_WIDTH),
            "busy": Out(1),
            # status, per unit
            "seq": Out(each(SEQ_WIDTH)),
            "finished": Out(units),
            "released": Out(units),
            "released_at": Out(each(TIME_WIDTH)),
            "aborted": Out(units),
            "abort_seq": Out(each(SEQ_WIDTH)),
            "abort_estimate": Out(each(TIME_WIDTH)),
            "ones": Out(each(16)),
            "total": Out(each(16)),
            "s": Out(each(TIME_WIDTH)),
            "mt": Out(each(TIME_WIDTH)),
            "e": Out(each(TIME_WIDTH)),
            "stamp_valid": Out(each(STAMP_FLAGS)),
            "stamp_seq": Out(each(SEQ_WIDTH)),
            "release_ones": Out(each(16)),
            "stale": Out(each(32)),
            "errors": Out(each(BARRIER_ERROR_LAYOUT)),
            "error": Out(units),
            "log_seq": Out(each(SEQ_WIDTH)),
            "log_ids": Out(each(max_nodes)),
            "log_count": Out(each(16)),
            "log_overflow": Out(units),
            # waiting for a release
            "watch_mask": In(units),
            "watch_seq": In(SEQ_WIDTH),
            "watch_all": Out(1),
        })

    @property
    def n_units(self):
        return self._n_units

    @property
    def max_children(self):
        return self._max_children

    @property
    def max_nodes(self):
        return self._max_nodes

    @property
    def latency(self):
        return self._latency

    @property
    def links(self):
        return self._links

    @property
    def log_depth(self):
        return self._log_depth

    def targets(self, sender):
        """Indices of the units ``sender`` has a link to."""
        return list(self._targets[sender])

    def elaborate(self, platform):
        m = Module()
        # Everything runs in a local domain `bt` on the `sync` clock whose reset is the `sync`
        # reset registered once: no logic then depends combinationally on the top's `rst`
        # input, which keeps Verilator from evaluating all of it again on input changes.
        m.domains.bt = bt = ClockDomain("bt", local=True)
        rst_q = Signal(init=1, reset_less=True)
        m.d.sync += rst_q.eq(ResetSignal("sync"))
        m.d.comb += [bt.clk.eq(ClockSignal("sync")), bt.rst.eq(rst_q)]

        now = Signal(TIME_WIDTH)
        m.d.bt += now.eq(now + 1)
        m.d.comb += self.now.eq(now)

        r, hit_a, hit_b = self._registered_inputs(m, now)
        self._connect_units(m, now, r, hit_a, hit_b)
        pause, gap = self._random_pauses(m, r)
        head_valid, head, head_done = self._link_pipelines(m, pause)
        req, dropped = self._requests(m, head_valid, head)
        self._receivers(m, r, gap, req, head, head_done, dropped)
        return m

    def _registered_inputs(self, m, now):
        nu = self._n_units
        # Every input is registered before it reaches a unit or the network: the units then
        # see only flops, and Verilator evaluates their logic once per clock edge instead of
        # again whenever the bench writes an input.  So an input written in cycle t acts in
        # cycle t + 1; the timers compare with now + 1 so that done comes in cycle at.
        # Per-unit inputs are registered unit by unit (narrow flops; a slice of one wide
        # register costs Verilator a wide-vector operation at every use).
        per_unit = ("node_id", "parent_id", "has_parent", "child_id", "child_valid", "route_we",
                    "route_addr", "route_data", "done", "done_seq", "seq_a", "seq_b")
        shared = ("route_clear", "mode", "ac_sub", "m", "c", "estimate", "start", "start_seq",
                  "log_index", "pause_rate", "gap_rate", "inject_valid", "inject_to", "inject")
        r = {}
        for name in per_unit:
            port = getattr(self, name)
            r[name] = []
            for i in range(nu):
                elem = port[i]
                reg = Signal.like(elem, name=f"{name}_r{i}")
                m.d.bt += reg.eq(elem)
                r[name].append(reg)
        for name in shared:
            port = getattr(self, name)
            r[name] = Signal.like(port, name=f"{name}_r")
            m.d.bt += r[name].eq(port)
        hit_a = [Signal(name=f"hit_a{i}") for i in range(nu)]
        hit_b = [Signal(name=f"hit_b{i}") for i in range(nu)]
        for i in range(nu):
            m.d.bt += [
                hit_a[i].eq((self.at_a[i] != 0) & (self.at_a[i] == now + 1)),
                hit_b[i].eq((self.at_b[i] != 0) & (self.at_b[i] == now + 1)),
            ]
        return r, hit_a, hit_b


    def _connect_units(self, m, now, r, hit_a, hit_b):
        units = self.units
        has_parent, parent_id = r["has_parent"], r["parent_id"]
        clashes = []
        for i, u in enumerate(units):
            if self._unit_module is None:
                m.submodules[f"unit{i}"] = DomainRenamer("bt")(u)
            else:
                ports = {"i_clk": ClockSignal("bt"), "i_rst": ResetSignal("bt")}
                for path, member, value in self.unit_prototype.signature.flatten(u):
                    name = "__".join(str(part) for part in path)
                    ports[("i_" if member.flow == In else "o_") + name] = Value.cast(value)
                m.submodules[f"unit{i}"] = Instance(self._unit_module, **ports)
            m.d.comb += [
                u.now.eq(now),
                u.node_id.eq(r["node_id"][i]),
                u.parent_id.eq(parent_id[i]),
                u.has_parent.eq(has_parent[i]),
                u.child_id.eq(r["child_id"][i]),
                u.child_valid.eq(r["child_valid"][i]),
                u.route_we.eq(r["route_we"][i]),
                u.route_addr.eq(r["route_addr"][i]),
                u.route_data.eq(r["route_data"][i]),
                u.route_clear.eq(r["route_clear"]),
                u.mode.eq(r["mode"]),
                u.ac_sub.eq(r["ac_sub"]),
                u.m.eq(r["m"]),
                u.c.eq(r["c"]),
                u.estimate.eq(r["estimate"]),
                u.start.eq(r["start"]),
                u.start_seq.eq(r["start_seq"]),
                u.log_index.eq(r["log_index"]),
            ]
            # Done: the direct strobe, then timer a, then timer b.
            direct = r["done"][i]
            m.d.comb += [
                u.done.eq(direct | hit_a[i] | hit_b[i]),
                u.done_seq.eq(Mux(direct, r["done_seq"][i],
                                  Mux(hit_a[i], r["seq_a"][i], r["seq_b"][i]))),
            ]
            clashes.append((direct & (hit_a[i] | hit_b[i])) | (hit_a[i] & hit_b[i]))
        m.d.bt += self.clash.eq(self.clash + sum(clashes))

        # Status: one concatenation per port.
        for name in ("route_rdata", "seq", "finished", "released", "released_at", "aborted",
                     "abort_seq", "abort_estimate", "ones", "total", "s", "mt", "e",
                     "stamp_valid", "stamp_seq", "release_ones", "stale", "errors", "error",
                     "log_seq", "log_ids", "log_count", "log_overflow"):
            m.d.comb += getattr(self, name).eq(Cat(getattr(u, name) for u in units))
        m.d.comb += self.watch_all.eq(Cat(~self.watch_mask[i] | (u.seq == self.watch_seq)
                                          for i, u in enumerate(units)).all())


    def _random_pauses(self, m, r):
        nu = self._n_units
        pause, gap = [], []
        for i in range(nu):
            lp = Signal(16, init=_lfsr_seed(i, 0), name=f"pause_lfsr{i}")
            lg = Signal(16, init=_lfsr_seed(i, 1), name=f"gap_lfsr{i}")
            m.d.bt += [lp.eq(_lfsr_next(lp)), lg.eq(_lfsr_next(lg))]
            pause.append(lp[:8] < r["pause_rate"])
            gap.append(lg[:8] < r["gap_rate"])
        return pause, gap

    def _link_pipelines(self, m, pause):
        """A pipeline of ``latency`` registers per sender."""
        lat, units = self._latency, self.units
        head_valid, head, head_done = [], [], []
        busy = []
        for s, u in enumerate(units):
            done_s = Signal(name=f"link{s}_done")       # head delivered or dropped this cycle
            head_done.append(done_s)
            busy.append(u.tx.valid)
            if lat == 0:
                hv = Signal(name=f"link{s}_valid")
                m.d.comb += [hv.eq(u.tx.valid & ~pause[s]), u.tx.ready.eq(done_s & ~pause[s])]
                head_valid.append(hv)
                head.append(u.tx.payload)
                continue
            sv = [Signal(name=f"link{s}_v{j}") for j in range(lat)]
            sp = [Signal(NOTICE_LAYOUT, name=f"link{s}_p{j}") for j in range(lat)]
            advance = ~sv[-1] | done_s
            m.d.comb += u.tx.ready.eq(advance & ~pause[s])
            with m.If(advance):
                m.d.bt += [sv[0].eq(u.tx.valid & ~pause[s]), sp[0].eq(u.tx.payload)]
                for j in range(1, lat):
                    m.d.bt += [sv[j].eq(sv[j - 1]), sp[j].eq(sp[j - 1])]
            busy.extend(sv)
            head_valid.append(sv[-1])
            head.append(sp[-1])
        m.d.comb += self.busy.eq(Cat(busy).any())
        return head_valid, head, head_done

    def _requests(self, m, head_valid, head):
        """Sender s's head wants receiver r; a head no link takes is dropped and counted."""
        nu = self._n_units
        req = {}
        dropped = []
        for s in range(nu):
            hits = []
            for rcv in self._targets[s]:
                want = Signal(name=f"req_{s}_{rcv}")
                m.d.comb += want.eq(head_valid[s] & (head[s].dst == rcv))
                req[s, rcv] = want
                hits.append(want)
            drop = Signal(name=f"link{s}_drop")
            m.d.comb += drop.eq(head_valid[s] & ~Cat(hits).any() if hits else head_valid[s])
            dropped.append(drop)
        misrouted = Signal(COUNT_WIDTH)
        m.d.bt += misrouted.eq(misrouted + sum(dropped))
        m.d.comb += self.misrouted.eq(misrouted)
        return req, dropped

    def _receivers(self, m, r, gap, req, head, head_done, dropped):
        """Inject first, then the lowest linked sender."""
        nu, units = self._n_units, self.units
        has_parent, parent_id = r["has_parent"], r["parent_id"]
        granted = [[] for _ in range(nu)]
        off_tree = []
        down_count, up_count = [], []
        for rcv, u in enumerate(units):
            senders = [s for s in range(nu) if (s, rcv) in req]
            inj = r["inject_valid"] & (r["inject_to"] == rcv)
            g = {s: Signal(name=f"grant_{s}_{rcv}") for s in senders}
            for s in senders:
                granted[s].append(g[s])
            with m.If(inj):
                m.d.comb += [u.rx.valid.eq(1), u.rx.payload.eq(r["inject"])]
            with m.Elif(~gap[rcv]):
                for idx, s in enumerate(senders):
                    with (m.If if idx == 0 else m.Elif)(req[s, rcv]):
                        m.d.comb += [u.rx.valid.eq(1), u.rx.payload.eq(head[s]), g[s].eq(1)]
            # Link counters: judged by the configured parents.
            kind = u.rx.payload.kind.as_value()
            down_hit = Signal(name=f"down_hit_{rcv}")
            m.d.comb += down_hit.eq(Cat(g[s] & has_parent[rcv] & (parent_id[rcv] == s)
                                        for s in senders).any() if senders else 0)
            counts = [Signal(COUNT_WIDTH, name=f"down{rcv}_k{k}") for k in range(4)]
            for k in range(4):
                with m.If(down_hit & (kind == k)):
                    m.d.bt += counts[k].eq(counts[k] + 1)
            down_count.append(Cat(counts))
            for s in senders:
                is_down = has_parent[rcv] & (parent_id[rcv] == s)
                is_up = has_parent[s] & (parent_id[s] == rcv)
                off_tree.append(g[s] & ~is_down & ~is_up)
        for s, u in enumerate(units):
            got = Cat(granted[s]).any() if granted[s] else Const(0)
            m.d.comb += head_done[s].eq(got | dropped[s])
            up_hit = got & has_parent[s] & (head[s].dst == parent_id[s])
            kind = head[s].kind.as_value()
            counts = [Signal(COUNT_WIDTH, name=f"up{s}_k{k}") for k in range(4)]
            for k in range(4):
                with m.If(up_hit & (kind == k)):
                    m.d.bt += counts[k].eq(counts[k] + 1)
            up_count.append(Cat(counts))
        m.d.comb += [self.down_count.eq(Cat(down_count)), self.up_count.eq(Cat(up_count))]
        off = Signal(COUNT_WIDTH)
        if off_tree:
            m.d.bt += off.eq(off + sum(off_tree))
        m.d.comb += self.off_tree.eq(off)
