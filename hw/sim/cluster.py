"""A simulated cluster: N NIC cores joined by a switch, and its Verilog.

Node ``i``'s ``net_tx`` feeds the switch's ``rx_i`` and the switch's ``tx_i`` feeds node ``i``'s
``net_rx``, each through a :class:`~nicoll.hw.sim.fabric.FabricLink` when the cluster is built
with a fabric (a latency in cycles per link and a gap after each packet; without one, the
default, they are wires and nothing is built); node ``i``'s ``node_id`` is tied to ``i``.
With a repack node each of its units has a switch port of its own after the cores' (and
links of its own).  The host reaches each node through the top-level ports ``n<i>_s_axil``
(registers) and ``n<i>_s_axi`` (device memory).

In the Verilog from :func:`cluster_verilog` and :func:`niccore_verilog` an interface member
becomes ``<port>__<member>`` (``n0_s_axil__awaddr``, ``s_axi__wdata``), next to ``clk`` and
``rst`` (active high, synchronous).  For the simulator's harness the cluster's Verilog also
has ``n<i>_activity`` (bit 0: node ``i`` sent a beat into the switch in this cycle, bit 1: it
took one from the switch, bit 2: its engine fed an operand pair to the ALU; the lanes of
:data:`nicoll.cluster.TRACE_LANES`) and ``cycles`` (node 0's cycle counter), so a trace is
read from ports rather than from signals inside the cores.  cocotbext-axi finds a port by its prefix:
``AxiLiteBus.from_prefix(dut, "n0_s_axil", bus_separator="__")``.  The single core's
network ports carry AXI4-Stream names (``net_tx__tdata``, ``tkeep``, ``tlast``, ``tdest``,
``tuser`` = the packet's ``control`` bit, ``tvalid``, ``tready``) so
``AxiStreamBus.from_prefix(dut, "net_tx", bus_separator="__")`` drives them unchanged;
inside the gateware they are packet streams.
"""

from amaranth.hdl import (Cat, ClockDomain, ClockSignal, DomainRenamer, Instance, Module,
                          ResetSignal, Signal)
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..bus.axi import AXI4LiteSignature, AXI4Signature, AXI4StreamSignature
from ..core import (AXI_ADDR_WIDTH, AXI_ID_WIDTH, CSR_ADDR_WIDTH, DEFAULT_REPACK_UNITS, NicCore,
                      CoreParams)
from ..net.packet import DEST_WIDTH
from .fabric import FabricLink
from .faults import fault_config_layout
from .faulty_link import FaultyLink, link_counters_layout, max_packet_beats
from .verilog import prepare_yosys, simulation_verilog
from ..net.switch import RepackSteering, Switch


__all__ = ["ClusterTop", "cluster_verilog", "niccore_verilog"]

#: Verilog module names of a node's core in :func:`cluster_verilog`: node 0's, and the other
#: nodes' (no repack units).
CORE_MODULE = "nicoll_niccore"
PLAIN_CORE_MODULE = "nicoll_niccore_plain"
#: Bits of each node's ``n<i>_activity`` port in the cluster's Verilog: send, receive, reduce.
ACTIVITY_LANES = 3


class ClusterTop(wiring.Component):
    """``nodes`` NIC cores and a :class:`~nicoll.hw.net.switch.Switch`.

    Parameters
    ----------
    nodes : int
        Number of nodes, 1..``max_nodes``.
    data_width, max_nodes, mem_size, alu_capabilities :
        As for :class:`~nicoll.hw.core.NicCore`; every node is built alike.
    repack_units : int
        Repack units whose units and control tree serve the cluster's aggregate exchanges
        (seed 003): node 0's, or the repack node's; the other nodes build none, since
        nothing would reach theirs.
    repack_node : bool
        Put the repack units in the switch: one more core, node id ``nodes``, built with the
        units (its engine and barrier unit stay idle), with ports ``n<nodes>_s_axil`` /
        ``n<nodes>_s_axi``; node 0 is then an ordinary rank.  Its port carries the control
        tree's registrations and notices, and each unit has a switch port of its own
        (ports ``nodes + 1`` on, :meth:`unit_port`), which the switch steers the unit's
        messages to (:class:`~nicoll.hw.net.switch.RepackSteering`), as seed 003 places the
        units in the switch.
    uplink_latency, downlink_latency, link_gap : int
        The fabric (issue 20), in cycles: each node's link into the switch delays a beat by
        ``uplink_latency``, its link out of it by ``downlink_latency``, and each link idles
        ``link_gap`` cycles after every packet (:class:`~nicoll.hw.sim.fabric.FabricLink`).
        All 0 (the default): no link is built.
    faults : bool
        Build a :class:`~nicoll.hw.sim.faulty_link.FaultyLink` on each direction of every
        switch port (issue 22): a CRC, a fault injector and a CRC check, configured at run
        time through ``fault_config`` (all rates 0: nothing is injected, and each packet
        costs the check's store-and-forward).  False (the default): none is built.

    Members
    -------
    n<i>_s_axil : ``In(AXI4LiteSignature(16))`` for each node
    n<i>_s_axi : ``In(AXI4Signature(addr_width=32, data_width=data_width, id_width=8))``
    switch_dropped : ``Out(32)``
        Packets the switch dropped because they named no node.
    fault_config : ``In(fault_config_layout())``, with ``faults`` only
        Every injector's rates, seed and target (:mod:`nicoll.hw.sim.faults`).
    fault_counters : ``Out(ArrayLayout(link_counters_layout(), 2 * switch_ports))``, with
        ``faults`` only
        What each link injected and dropped: link ``2 * p`` into switch port ``p``, link
        ``2 * p + 1`` out of it.

    Attributes
    ----------
    cores : list of :class:`~nicoll.hw.core.NicCore`
        The nodes, in rank order (``cores[i].devmem.data`` is node ``i``'s memory).
    switch : :class:`~nicoll.hw.net.switch.Switch`

    Both are built on first use (at the latest by :meth:`elaborate`).
    """

    def __init__(self, *, nodes, data_width=256, max_nodes=64, mem_size=65536,
                 alu_capabilities=None, repack_units=DEFAULT_REPACK_UNITS, repack_node=False,
                 uplink_latency=0, downlink_latency=0, link_gap=0, faults=False):
        # Ref: seed 003 (CN111614581), the units "in a switch": with repack_node, each on a
        # switch port of its own.
        self._MustUse__silence = True       # a top refused for its arguments is never built
        if not isinstance(repack_node, bool):
            raise TypeError(f"repack_node must be a bool, not {repack_node!r}")
        if repack_node and not repack_units:
            raise ValueError("repack_node needs repack units (repack_units >= 1)")
        if not isinstance(faults, bool):
            raise TypeError(f"faults must be a bool, not {faults!r}")
        params = CoreParams(data_width=data_width, max_nodes=max_nodes, mem_size=mem_size,
                            alu_capabilities=alu_capabilities, repack_units=repack_units)
        self._alu_capabilities = params.alu_capabilities
        if not isinstance(nodes, int) or isinstance(nodes, bool):
            raise TypeError(f"nodes must be an integer, not {nodes!r}")
        if not 1 <= nodes <= max_nodes:
            raise ValueError(f"nodes must be between 1 and max_nodes ({max_nodes}), "
                             f"not {nodes!r}")
        if nodes + repack_node > max_nodes:
            raise ValueError(f"the repack node takes node id {nodes}: nodes + 1 must be at "
                             f"most max_nodes ({max_nodes})")
        self._nodes = nodes
        self._repack_node = repack_node
        self._hub = nodes if repack_node else 0
        self._hw_nodes = nodes + repack_node
        self._data_width = data_width
        self._max_nodes = max_nodes
        self._mem_size = mem_size
        self._repack_units = repack_units
        # Built once here so bad figures are refused before anything else is built.
        self._link_args = [(uplink_latency, link_gap), (downlink_latency, link_gap)]
        for latency, gap in self._link_args:
            probe = FabricLink(data_width, latency=latency, gap=gap)
            probe._MustUse__silence = True
        members = {}
        for i in range(self._hw_nodes):
            members[f"n{i}_s_axil"] = In(AXI4LiteSignature(CSR_ADDR_WIDTH))
            members[f"n{i}_s_axi"] = In(AXI4Signature(addr_width=AXI_ADDR_WIDTH,
                                                      data_width=data_width,
                                                      id_width=AXI_ID_WIDTH))
        members["switch_dropped"] = Out(32)
        self._faults = faults
        self._max_packet_beats = max_packet_beats(data_width, packet_beats=params.packet_beats,
                                                  repack_capacity=params.repack_capacity)
        if faults:
            members["fault_config"] = In(fault_config_layout())
            members["fault_counters"] = Out(data.ArrayLayout(link_counters_layout(),
                                                             2 * self.switch_ports))
        super().__init__(members)
        self._cores = None
        self._switch = None
        self._MustUse__silence = False

    @property
    def cores(self):
        if self._cores is None:
            self._cores = [NicCore(data_width=self._data_width, max_nodes=self._max_nodes,
                                   mem_size=self._mem_size,
                                   alu_capabilities=self._alu_capabilities,
                                   repack_units=self._repack_units if i == self._hub else 0,
                                   repack_unit_ports=self._repack_node and i == self._hub)
                           for i in range(self._hw_nodes)]
        return self._cores

    @property
    def switch(self):
        if self._switch is None:
            self._switch = cluster_switch(self._hw_nodes, self._data_width, self._repack_node,
                                          self._repack_units)
        return self._switch

    @property
    def switch_ports(self):
        """The switch's ports: one per core, then with a repack node one per unit."""
        return self._hw_nodes + (self._repack_units if self._repack_node else 0)

    @property
    def faults(self):
        """Whether every link passes a :class:`~nicoll.hw.sim.faulty_link.FaultyLink`."""
        return self._faults

    def _fault_args(self):
        """The ``faults`` argument of :func:`_links`: None without fault injection."""
        if not self._faults:
            return None
        return self._max_packet_beats, self.fault_config, self.fault_counters

    @property
    def nodes(self):
        return self._nodes

    @property
    def hw_nodes(self):
        """The cores: the ranks, and the repack node if there is one."""
        return self._hw_nodes

    @property
    def hub(self):
        """The node id of the repack units."""
        return self._hub

    @property
    def data_width(self):
        return self._data_width

    @property
    def max_nodes(self):
        return self._max_nodes

    @property
    def mem_size(self):
        return self._mem_size

    def s_axil(self, i):
        """Register port of node ``i``."""
        return getattr(self, f"n{i}_s_axil")

    def s_axi(self, i):
        """Device memory port of node ``i``."""
        return getattr(self, f"n{i}_s_axi")

    def elaborate(self, platform):
        m = Module()
        m.submodules.switch = switch = self.switch
        for i, core in enumerate(self.cores):
            m.submodules[f"node{i}"] = core
            wiring.connect(m, wiring.flipped(self.s_axil(i)), core.s_axil)
            wiring.connect(m, wiring.flipped(self.s_axi(i)), core.s_axi)
            to_switch, from_switch = _links(m, i, self._data_width, self._link_args,
                                            self._fault_args())
            wiring.connect(m, core.net_tx, to_switch(switch.rx(i)))
            wiring.connect(m, from_switch(switch.tx(i), flipped=True), core.net_rx)
            m.d.comb += core.node_id.eq(i)
        for k, port in enumerate(range(self._hw_nodes, self.switch_ports)):
            core = self.cores[self._hub]
            to_switch, from_switch = _links(m, port, self._data_width, self._link_args,
                                            self._fault_args())
            wiring.connect(m, core.unit_tx(k), to_switch(switch.rx(port)))
            wiring.connect(m, from_switch(switch.tx(port), flipped=True), core.unit_rx(k))
        m.d.comb += self.switch_dropped.eq(switch.dropped)
        return m


def cluster_switch(hw_nodes, data_width, repack_node, repack_units):
    """The switch of a simulated cluster of ``hw_nodes`` cores: with a repack node (the last
    core) a port more for each of its units, where the switch steers their messages."""
    if not repack_node:
        return Switch(hw_nodes, data_width)
    return Switch(hw_nodes + repack_units, data_width,
                  steering=RepackSteering(hub=hw_nodes - 1, first_port=hw_nodes,
                                          units=repack_units))


def _links(m, i, data_width, link_args, faults=None):
    """Node ``i``'s two links, built into ``m`` unless both are wires.  Returns two functions
    that put a link in front of a switch port: ``to_switch(rx)`` gives the stream the node's
    ``net_tx`` drives, ``from_switch(tx, flipped=True)`` the one that drives its ``net_rx``
    (the port itself where the link is a wire).

    ``faults``, if given, is ``(max_packet_beats, config, counters)``: each direction then
    also passes a :class:`~nicoll.hw.sim.faulty_link.FaultyLink` (after its fabric link),
    link ``2 * i`` into the switch and ``2 * i + 1`` out of it, configured by ``config`` and
    counting into ``counters[link]``."""
    def place(name, latency, gap, link_index):
        stages = []
        if latency or gap:
            stages.append(FabricLink(data_width, latency=latency, gap=gap))
            m.submodules[f"{name}{i}"] = stages[-1]
        if faults is not None:
            beats, config, counters = faults
            faulty = FaultyLink(data_width, link=link_index, max_packet_beats=beats)
            m.submodules[f"faulty_{name}{i}"] = faulty
            m.d.comb += [faulty.config.eq(config), counters[link_index].eq(faulty.counters)]
            stages.append(faulty)
        if not stages:
            return lambda port, flipped=False: port
        for a, b in zip(stages, stages[1:]):
            wiring.connect(m, a.o, b.i)

        def join(port, flipped=False):
            if flipped:                 # the switch drives the link
                wiring.connect(m, port, stages[0].i)
                return stages[-1].o
            wiring.connect(m, stages[-1].o, port)
            return stages[0].i
        return join
    (up, gap_up), (down, gap_down) = link_args
    return place("uplink", up, gap_up, 2 * i), place("downlink", down, gap_down, 2 * i + 1)


class _ClusterOfInstances(wiring.Component):
    """The ports of :class:`ClusterTop`, with each node an instance of the Verilog module
    ``nicoll_niccore`` (:func:`niccore_verilog`) instead of its own copy of the gateware."""

    def __init__(self, *, nodes, repack_node=False, uplink_latency=0, downlink_latency=0,
                 link_gap=0, faults=False, **core_kwargs):
        self._nodes = nodes + repack_node
        self._hub = nodes if repack_node else 0
        self._repack_node = repack_node
        self._repack_units = core_kwargs.get("repack_units", DEFAULT_REPACK_UNITS)
        self._link_args = [(uplink_latency, link_gap), (downlink_latency, link_gap)]
        # Only their signatures are wanted here; cluster_verilog() converts cores of its own.
        self._core_signatures = []
        for unit_ports in (False, True):
            core = _NicCoreVerilogTop(**core_kwargs, repack_unit_ports=unit_ports and repack_node)
            core._MustUse__silence = core.core._MustUse__silence = True
            self._core_signatures.append(core.signature)
        self._plain_module = (CORE_MODULE if not core_kwargs.get("repack_units", DEFAULT_REPACK_UNITS)
                              else PLAIN_CORE_MODULE)
        self._data_width = core_kwargs.get("data_width", 256)
        top = ClusterTop(nodes=nodes, repack_node=repack_node, uplink_latency=uplink_latency,
                         downlink_latency=downlink_latency, link_gap=link_gap, faults=faults,
                         **core_kwargs)
        top._MustUse__silence = True          # only its ports are copied
        self._fault_beats = top._max_packet_beats if faults else None
        members = dict(top.signature.members)
        for i in range(self._nodes):
            members[f"n{i}_activity"] = Out(ACTIVITY_LANES)
        members["cycles"] = Out(64)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        # The nodes and the switch run in a domain whose reset is the top's ``rst`` one cycle
        # later, from a flop.  Reset feeds every flop's next-state logic; from the top-level
        # input, Verilator would evaluate all of that logic again at every eval() of the
        # harness (its input-change region), from a flop only once per clock edge.
        # The flop is reset-less: a flop of the sync domain would itself be held at 0 while
        # ``rst`` is high, and the nodes would never see a reset (Yosys tied it to 0).
        m.domains.nodes = nodes = ClockDomain("nodes", local=True)
        rst_q = Signal(reset_less=True)
        m.d.comb += [nodes.clk.eq(ClockSignal()), nodes.rst.eq(rst_q)]
        m.d.sync += rst_q.eq(ResetSignal())
        m.submodules.switch = switch = DomainRenamer("nodes")(cluster_switch(
            self._nodes, self._data_width, self._repack_node, self._repack_units))
        for i in range(self._nodes):
            ports = {"i_clk": ClockSignal("nodes"), "i_rst": ResetSignal("nodes")}
            signature = self._core_signatures[i == self._hub]
            local = signature.create(path=(f"node{i}",))
            for path, member, value in signature.flatten(local):
                ports[("i_" if member.flow == In else "o_") + "__".join(path)] = value
            m.d.comb += local.node_id.eq(i)
            module = CORE_MODULE if i == self._hub else self._plain_module
            m.submodules[f"node{i}"] = Instance(module, **ports)
            m.d.comb += getattr(self, f"n{i}_activity").eq(Cat(
                local.net_tx.tvalid & local.net_tx.tready,
                local.net_rx.tvalid & local.net_rx.tready,
                local.reduce_beat))
            if i == 0:
                m.d.comb += self.cycles.eq(local.cycles)
            wiring.connect(m, wiring.flipped(getattr(self, f"n{i}_s_axil")), local.s_axil)
            wiring.connect(m, wiring.flipped(getattr(self, f"n{i}_s_axi")), local.s_axi)
            self._join(m, switch, i, local.net_tx, local.net_rx)
            if i == self._hub and self._repack_node:
                for k in range(self._repack_units):
                    self._join(m, switch, self._nodes + k, getattr(local, f"unit_tx_{k}"),
                               getattr(local, f"unit_rx_{k}"))
        m.d.comb += self.switch_dropped.eq(switch.dropped)
        return m

    def _join(self, m, switch, port, axis_tx, axis_rx):
        """A core's AXI4-Stream pair (``axis_tx`` out of it, ``axis_rx`` into it) to switch
        port ``port``, through that port's links.  The links run in the nodes' domain, as the
        switch does."""
        links = Module()
        faults = (None if self._fault_beats is None
                  else (self._fault_beats, self.fault_config, self.fault_counters))
        to_switch, from_switch = _links(links, port, self._data_width, self._link_args, faults)
        m.submodules[f"links{port}"] = DomainRenamer("nodes")(links)
        tx, rx = to_switch(switch.rx(port)), from_switch(switch.tx(port), flipped=True)
        m.d.comb += [tx.payload.data.eq(axis_tx.tdata), tx.payload.keep.eq(axis_tx.tkeep),
                     tx.payload.last.eq(axis_tx.tlast), tx.payload.dest.eq(axis_tx.tdest),
                     tx.payload.control.eq(axis_tx.tuser), tx.valid.eq(axis_tx.tvalid),
                     axis_tx.tready.eq(tx.ready),
                     axis_rx.tdata.eq(rx.payload.data), axis_rx.tkeep.eq(rx.payload.keep),
                     axis_rx.tlast.eq(rx.payload.last), axis_rx.tdest.eq(rx.payload.dest),
                     axis_rx.tuser.eq(rx.payload.control), axis_rx.tvalid.eq(rx.valid),
                     rx.ready.eq(axis_rx.tready)]


def cluster_verilog(*, optimize=True, **kwargs):
    """Verilog of ``ClusterTop(**kwargs)`` as a module named ``nicoll_cluster``, for simulation.

    The core is converted once, as module ``nicoll_niccore`` (with the repack units: node 0,
    or the repack node of ``repack_node=True``, whose units have ports of their own), and
    once more without repack units as
    ``nicoll_niccore_plain`` for the other nodes (when there are any and the build has
    units); each is instantiated for its nodes.  Elaborating one
    copy instead of N keeps big clusters quick to build.

    With ``optimize`` (the default) Yosys's generic optimizations run over the netlist before
    it is written (:mod:`nicoll.hw.sim.verilog`); the logic is the same, but Verilator gets
    about half the text to compile and a simulated cycle costs about half as much.
    """
    kwargs = dict(kwargs)
    nodes = kwargs.pop("nodes")
    # The top's own arguments (the links, the repack node); the rest build each core.
    top_args = {k: kwargs.pop(k) for k in ("uplink_latency", "downlink_latency", "link_gap",
                                           "repack_node", "faults") if k in kwargs}
    parts = [(_NicCoreVerilogTop(**kwargs, repack_unit_ports=bool(top_args.get("repack_node"))),
              CORE_MODULE)]
    if (nodes > 1 or top_args.get("repack_node")) and kwargs.get("repack_units",
                                                                DEFAULT_REPACK_UNITS):
        parts.append((_NicCoreVerilogTop(**dict(kwargs, repack_units=0)), PLAIN_CORE_MODULE))
    parts.append((_ClusterOfInstances(nodes=nodes, **top_args, **kwargs), "nicoll_cluster"))
    if not optimize:
        return "\n".join(simulation_verilog(part, name, optimize=False) for part, name in parts)
    # Each module's Yosys run starts as soon as it is converted, so the runs overlap the
    # conversion of the next (about 20 s instead of 40 for the 8-node demo cluster).
    prepare_yosys()
    runs = [simulation_verilog(part, name, wait=False) for part, name in parts]
    return "\n".join(run.result() for run in runs)


class _NicCoreVerilogTop(wiring.Component):
    """A NicCore whose network ports are named as AXI4-Stream for a Verilog top."""

    def __init__(self, **kwargs):
        self.core = NicCore(**kwargs)
        members = dict(self.core.signature.members)
        axis = AXI4StreamSignature(self.core.data_width, DEST_WIDTH, user_width=1)
        #: The packet ports (the network port, and the repack units' own): (name, outgoing).
        self._packet_ports = [(name, member.flow == Out) for name, member in members.items()
                              if name.startswith(("net_", "unit_"))]
        for name, outgoing in self._packet_ports:
            members[name] = (Out if outgoing else In)(axis)
        # For activity traces: an operand pair entered the ALU; the core's cycle counter.
        members["reduce_beat"] = Out(1)
        members["cycles"] = Out(64)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self.core
        wiring.connect(m, wiring.flipped(self.s_axil), core.s_axil)
        wiring.connect(m, wiring.flipped(self.s_axi), core.s_axi)
        m.d.comb += core.node_id.eq(self.node_id)
        alu = core.engine.alu
        m.d.comb += [self.reduce_beat.eq(alu.a.valid & alu.a.ready),
                     self.cycles.eq(core.engine.now)]
        for name, outgoing in self._packet_ports:
            axis, pkt = getattr(self, name), getattr(core, name)
            pairs = [(axis.tdata, pkt.payload.data), (axis.tkeep, pkt.payload.keep),
                     (axis.tlast, pkt.payload.last), (axis.tdest, pkt.payload.dest),
                     (axis.tuser, pkt.payload.control), (axis.tvalid, pkt.valid)]
            for a, p in pairs:
                m.d.comb += a.eq(p) if outgoing else p.eq(a)
            m.d.comb += pkt.ready.eq(axis.tready) if outgoing else axis.tready.eq(pkt.ready)
        return m


def niccore_verilog(*, optimize=True, **kwargs):
    """Verilog of ``NicCore(**kwargs)`` as a module named ``nicoll_niccore``.

    Ports: ``s_axil__*``, ``s_axi__*``, ``node_id``, ``clk``, ``rst`` as in NicCore, and the
    network ports as AXI4-Stream ``net_tx__t*`` / ``net_rx__t*``; for simulation harnesses
    ``reduce_beat`` (an operand pair enters the ALU in this cycle) and ``cycles`` (the core's
    cycle counter, as the engine sees it).
    """
    return simulation_verilog(_NicCoreVerilogTop(**kwargs), CORE_MODULE, optimize=optimize)
