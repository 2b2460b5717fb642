# Ref: AMBA AXI and ACE Protocol Specification (IHI0022E) for s_axil / s_axi;
#      AMBA 4 AXI4-Stream Protocol Specification (IHI0051A) for net_tx / net_rx.
"""One nicoll NIC core: registers, device memory, barrier unit and network ports of a node.

The core answers its register map (:class:`~nicoll.hw.bus.csr.CSRSlave`), gives the host its
device memory (:class:`~nicoll.hw.bus.devmem.DeviceMemory`), counts cycles, and runs the barrier
unit (:class:`~nicoll.hw.barrier.BarrierUnit`, seed 004) whose notices travel as header-only
control packets (:class:`~nicoll.hw.net.packet.HeaderSender` / :class:`HeaderReceiver`) on
``net_tx`` / ``net_rx``.  Packets of other kinds are taken and dropped until the collective
engine that owns them is attached.
"""

from dataclasses import dataclass

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .regmap.generated import REGMAP
from .alu.capabilities import capability_masks, check_capabilities
from .bus.axi import AXI4LiteSignature, AXI4Signature
from .barrier.block import BarrierBlock
from .barrier.unit import MAX_NODES_LIMIT as _BARRIER_NODES_LIMIT
from .bus.csr import CSRSlave, drive_fields
from .bus.devmem import DeviceMemory
from .engine import DEFAULT_PACKET_BEATS, DEFAULT_QUEUE_DEPTH, Engine
from .engine.block import EngineBlock
from .net.packet import (DEST_WIDTH, PacketArbiter, PacketDemux,
                     PacketKind, packet_beat_layout, packet_stream)
from .repack.formats import MAX_RANKS as _REPACK_MAX_RANKS
from .repack.block import RepackBlock, repack_block_idle_values
from .repack.hub import DEFAULT_HUB_PACKET_BEATS
from .params import check_data_width, check_int, is_int
from .lib.skid import SkidBuffer


__all__ = ["NicCore", "CoreParams", "DEFAULT_REPACK_UNITS", "DEFAULT_REPACK_CAPACITY",
           "DEFAULT_REPACK_MAX_GROUP", "DEFAULT_BARRIER_CHILDREN", "repack_max_ranks"]


#: Width of the register bus address: the register map needs fewer bits, the rest is room.
CSR_ADDR_WIDTH = 16
#: Width of the host port's byte address and ID.
AXI_ADDR_WIDTH = 32
AXI_ID_WIDTH = 8
#: The barrier unit's bit vector and route table grow with max_nodes; it takes at most 4096.
MAX_NODES_LIMIT = _BARRIER_NODES_LIMIT
#: Child slots of the barrier unit: the register map has CHILD0 .. CHILD7; a core has
#: DEFAULT_BARRIER_CHILDREN unless told otherwise.
BARRIER_CHILDREN_LIMIT = 8
DEFAULT_BARRIER_CHILDREN = 4
#: Repack units a core can have (0: none).
REPACK_UNITS_LIMIT = 64
#: MEM_SIZE is a 32-bit register and the size a power of two, so 2 GiB is the largest.
MEM_SIZE_LIMIT = 1 << 31
#: Repack units of a core by default, each with a buffer of this many bytes taking subgroups
#: of up to this many ranks (seed 003; sized for small all-to-all blocks).
DEFAULT_REPACK_UNITS = 1
DEFAULT_REPACK_CAPACITY = 2048
DEFAULT_REPACK_MAX_GROUP = 8


@dataclass(frozen=True)
class CoreParams:
    """The build parameters of one NIC core, checked once: every block, the simulated
    cluster and the driver's cluster configuration take a core's limits from here.

    Fields are :class:`NicCore`'s parameters of the same names.  A parameter the design cannot
    build raises TypeError / ValueError naming it.  ``alu_capabilities`` comes out as the
    normalised frozenset of (ReduceOp, DType) pairs (or None: every pair).
    """
    data_width: int = 256
    max_nodes: int = 64
    mem_size: int = 65536
    alu_capabilities: frozenset | None = None
    barrier_children: int = DEFAULT_BARRIER_CHILDREN
    queue_depth: int = DEFAULT_QUEUE_DEPTH
    packet_beats: int = DEFAULT_PACKET_BEATS
    repack_units: int = DEFAULT_REPACK_UNITS
    repack_capacity: int = DEFAULT_REPACK_CAPACITY
    repack_max_group: int = DEFAULT_REPACK_MAX_GROUP
    repack_unit_ports: bool = False

    def __post_init__(self):
        check_data_width(self.data_width)
        check_int("max_nodes", self.max_nodes, 1, MAX_NODES_LIMIT)
        if not is_int(self.mem_size):
            raise TypeError(f"mem_size must be an integer, not {self.mem_size!r}")
        beat_bytes = self.data_width // 8
        mem_size = self.mem_size
        if (mem_size <= 0 or mem_size & (mem_size - 1) or mem_size % beat_bytes
                or mem_size > MEM_SIZE_LIMIT):
            raise ValueError(f"mem_size must be a power of two, a multiple of {beat_bytes} "
                             f"bytes (data_width / 8) and at most {MEM_SIZE_LIMIT}, "
                             f"not {mem_size!r}")
        check_int("repack_units", self.repack_units, 0, REPACK_UNITS_LIMIT)
        if not isinstance(self.repack_unit_ports, bool):
            raise TypeError(f"repack_unit_ports must be a bool, not {self.repack_unit_ports!r}")
        if self.repack_unit_ports and not self.repack_units:
            raise ValueError("repack_unit_ports needs repack units (repack_units is 0)")
        check_int("barrier_children", self.barrier_children, 1, BARRIER_CHILDREN_LIMIT)
        Engine.check_params(data_width=self.data_width, max_nodes=self.max_nodes,
                            mem_size=self.mem_size, queue_depth=self.queue_depth,
                            packet_beats=self.packet_beats)
        object.__setattr__(self, "alu_capabilities", check_capabilities(self.alu_capabilities))


def repack_max_ranks(max_nodes):
    """Ranks a core's repack control tree takes (register LIMITS.max_ranks): the build's
    nodes, at least 2 (a group of one has nothing to exchange) and at most the control
    tree's MAX_RANKS."""
    return max(2, min(max_nodes, _REPACK_MAX_RANKS))


class NicCore(wiring.Component):
    """A nicoll NIC core.

    Parameters
    ----------
    data_width : int
        Bits per beat of the network streams and of the device memory: 64, 128, 256 or 512.
    max_nodes : int
        Largest cluster this build joins, 1..4096 (reported in MAX_NODES).
    mem_size : int
        Bytes of device memory (reported in MEM_SIZE).
    alu_capabilities : set of (ReduceOp, DType) or None
        The pairs the reduction ALU of this build computes (reported in the ALU block's
        OPS_<TYPE> registers); None for every pair MPI defines.
    barrier_children : int
        Child slots of the barrier unit, 1..8 (reported in the barrier block's CAPS): 2 is
        enough for a binary tree, k for a k-ary one.
    queue_depth, packet_beats : int
        The engine's command queue and largest data packet (engine block CAPS, PACKET).
    repack_units : int
        Repack units of this node (seed 003; 0 for none), served by a control tree for
        exchanges of up to min(max_nodes, 256) ranks (:class:`~nicoll.hw.repack.hub.RepackHub`).
    repack_capacity, repack_max_group : int
        Each unit's buffer in bytes and its largest subgroup (repack block CAPS, CAPACITY).
    repack_unit_ports : bool
        Each repack unit on a network port of its own (``unit_tx_<k>``, ``unit_rx_<k>``),
        as on a switch that holds the units (seed 003); ``net_tx``/``net_rx`` then carry
        the hub's registrations and notices but no unit's messages.  For the simulated
        cluster's repack node.

    Members
    -------
    s_axil : ``In(AXI4LiteSignature(16))``
        Register bus (the map of :mod:`nicoll.hw.regmap.generated`).
    s_axi : ``In(AXI4Signature(addr_width=32, data_width=data_width, id_width=8))``
        Host port to the device memory, at byte address 0.
    net_tx : ``Out(packet_stream(data_width))``
        Packets this node sends; ``dest`` names the receiving node.
    net_rx : ``In(packet_stream(data_width))``
        Packets this node receives.
    node_id : ``In(16)``
        This node's id (its rank), strapped by the system; read back in NODE_ID.  Registered
        on entry: a change takes effect a cycle later.
    unit_tx_<k> : ``Out(packet_stream(data_width))``; unit_rx_<k> : ``In(...)``
        With ``repack_unit_ports``, repack unit ``k``'s port (:meth:`unit_tx`, :meth:`unit_rx`).

    Attributes
    ----------
    csr : :class:`~nicoll.hw.bus.csr.CSRSlave`
    barrier : :class:`~nicoll.hw.barrier.BarrierUnit`
        The barrier unit with ``barrier_children`` child slots.
    devmem : :class:`~nicoll.hw.bus.devmem.DeviceMemory`
        The device memory; ``devmem.data`` gives simulation testbenches its rows.  Both are
        built on first use (at the latest by :meth:`elaborate`), so a core that is only
        inspected leaves no unused elaboratable behind.
    """

    def __init__(self, *, data_width=256, max_nodes=64, mem_size=65536, alu_capabilities=None,
                 barrier_children=DEFAULT_BARRIER_CHILDREN, queue_depth=DEFAULT_QUEUE_DEPTH,
                 packet_beats=DEFAULT_PACKET_BEATS, repack_units=DEFAULT_REPACK_UNITS,
                 repack_capacity=DEFAULT_REPACK_CAPACITY,
                 repack_max_group=DEFAULT_REPACK_MAX_GROUP, repack_unit_ports=False):
        self.params = params = CoreParams(
            data_width=data_width, max_nodes=max_nodes, mem_size=mem_size,
            alu_capabilities=alu_capabilities, barrier_children=barrier_children,
            queue_depth=queue_depth, packet_beats=packet_beats, repack_units=repack_units,
            repack_capacity=repack_capacity, repack_max_group=repack_max_group,
            repack_unit_ports=repack_unit_ports)
        self.alu_capabilities = params.alu_capabilities
        self._barrier_children = barrier_children
        self._data_width = data_width
        self._max_nodes = max_nodes
        self._mem_size = mem_size
        super().__init__({
            "s_axil":  In(AXI4LiteSignature(CSR_ADDR_WIDTH)),
            "s_axi":   In(AXI4Signature(addr_width=AXI_ADDR_WIDTH, data_width=data_width,
                                        id_width=AXI_ID_WIDTH)),
            "net_tx":  Out(packet_stream(data_width)),
            "net_rx":  In(packet_stream(data_width)),
            "node_id": In(DEST_WIDTH),
            **{f"unit_{name}_{k}": flow(packet_stream(data_width))
               for k in range(repack_units if repack_unit_ports else 0)
               for name, flow in (("tx", Out), ("rx", In))},
        })
        self._repack_unit_ports = repack_unit_ports
        self._csr = None
        self._devmem = None
        self._barrier = None
        self._queue_depth = queue_depth
        self._packet_beats = packet_beats
        self._engine = None
        self._repack_units = repack_units
        self._repack_capacity = repack_capacity
        self._repack_max_group = repack_max_group
        self._hub = None
        if repack_units:
            block = self._repack_block()         # checks the repack parameters now
            block._MustUse__silence = block.hub._MustUse__silence = True
            self._hub = None

    @property
    def csr(self):
        if self._csr is None:
            self._csr = CSRSlave(REGMAP, addr_width=CSR_ADDR_WIDTH)
        return self._csr

    @property
    def devmem(self):
        if self._devmem is None:
            self._devmem = DeviceMemory(self._mem_size, self._data_width,
                                        addr_width=AXI_ADDR_WIDTH, id_width=AXI_ID_WIDTH,
                                        engine_ports=True)
        return self._devmem

    @property
    def barrier(self):
        return self._barrier_block().unit

    def _barrier_block(self):
        if self._barrier is None:
            self._barrier = BarrierBlock(data_width=self._data_width, max_nodes=self._max_nodes,
                                         max_children=self._barrier_children)
        return self._barrier

    @property
    def engine(self):
        """The collective engine (:class:`~nicoll.hw.engine.Engine`), built on first use with
        its registers (:class:`~nicoll.hw.engine.block.EngineBlock`)."""
        return self._engine_block().engine

    def _engine_block(self):
        if self._engine is None:
            self._engine = EngineBlock(
                data_width=self._data_width, max_nodes=self._max_nodes,
                mem_size=self._mem_size, alu_capabilities=self.alu_capabilities,
                queue_depth=self._queue_depth, packet_beats=self._packet_beats)
        return self._engine

    @property
    def hub(self):
        """The repack units and control tree (:class:`~nicoll.hw.repack.hub.RepackHub`),
        built on first use; None in a build without repack units."""
        block = self._repack_block()
        return None if block is None else block.hub

    def _repack_block(self):
        if self._hub is None and self._repack_units:
            self._hub = RepackBlock(data_width=self._data_width,
                                    max_ranks=repack_max_ranks(self._max_nodes),
                                    units=self._repack_units, max_group=self._repack_max_group,
                                    capacity_bytes=self._repack_capacity,
                                    packet_beats=DEFAULT_HUB_PACKET_BEATS,
                                    unit_ports=self._repack_unit_ports)
        return self._hub

    def unit_tx(self, k):
        """Repack unit ``k``'s output port (``repack_unit_ports`` only)."""
        return getattr(self, f"unit_tx_{k}")

    def unit_rx(self, k):
        """Repack unit ``k``'s input port (``repack_unit_ports`` only)."""
        return getattr(self, f"unit_rx_{k}")

    @property
    def data_width(self):
        return self._data_width

    @property
    def max_nodes(self):
        return self._max_nodes

    @property
    def mem_size(self):
        return self._mem_size

    def elaborate(self, platform):
        m = Module()
        m.submodules.csr = csr = self.csr
        m.submodules.devmem = devmem = self.devmem
        wiring.connect(m, wiring.flipped(self.s_axil), csr.bus)
        wiring.connect(m, wiring.flipped(self.s_axi), devmem.axi)

        # CYCLES: clock cycles since reset.
        cycles = Signal(64)
        m.d.sync += cycles.eq(cycles + 1)
        # The node id is a strap: registered once on entry, so the compares of packet
        # headers with it (the barrier's and the engine's decode) start at a flop inside
        # the core, not at whatever drives the port (the 64-bit core's path at seed 1 of
        # 1af2a45 ran from the harness's input register, 3.4 ns of routing, into the
        # barrier's notice decode).
        node_id = Signal.like(self.node_id, name="node_id_q")
        m.d.sync += node_id.eq(self.node_id)

        values = {
            ("global", "DATA_WIDTH", "bits"):  self._data_width,
            ("global", "MAX_NODES", "count"):  self._max_nodes,
            ("global", "NODE_ID", "id"):       node_id,
            ("global", "MEM_SIZE", "bytes"):   self._mem_size,
            ("global", "CYCLES", "count"):     cycles,
        }
        for dtype, mask in capability_masks(self.alu_capabilities).items():
            values["alu", f"OPS_{dtype.name}", "ops"] = mask
        engine_tx, engine_rx, engine_barrier = self._elaborate_engine(m, cycles, node_id)
        barrier_tx, barrier_rx = self._elaborate_barrier(m, cycles, node_id, engine_barrier)

        hub_ports = self._elaborate_hub(m, node_id)

        # Transmit: control packets first (barrier notices, clear-to-send, repack
        # registrations and notices), then data.  Receive: barrier notices to the barrier
        # unit, the engine's kinds to the engine, the repack units' kinds to the hub (to the
        # barrier receiver, which drops them, in a build without units).
        inputs = [barrier_tx, engine_tx] + ([hub_ports[0]] if hub_ports else [])
        # The grant is a flop: its choice no longer chains into the 256-bit output mux.
        m.submodules.tx_arbiter = arbiter = PacketArbiter(len(inputs), self._data_width,
                                                          registered_grant=True)
        for k, port in enumerate(inputs):
            tx_in = self._slice(m, f"tx_slice_{k}")
            wiring.connect(m, port, tx_in.i)
            wiring.connect(m, tx_in.o, getattr(arbiter, f"i_{k}"))
        # The output slice keeps its two entries in place behind a read pointer: the
        # arbiter's multiplexer then ends in an entry flop whose enable comes from flops, with
        # no second 2:1 choice (skid or input) behind it.  The 256-bit core's path at seed 1
        # of the ninth pass ran from the grant through both multiplexers (3 LUTs, 8.1 ns of
        # routing: the grant drives every payload bit).
        tx_out = self._slice(m, "tx_slice_out", mux_output=True)
        wiring.connect(m, arbiter.o, tx_out.i)
        wiring.connect(m, tx_out.o, wiring.flipped(self.net_tx))
        route = {PacketKind.BARRIER: 0, PacketKind.CLEAR: 1, PacketKind.DATA: 1,
                 PacketKind.REPACK_NOTICE: 1, PacketKind.REPACK_OUT: 1}
        if hub_ports:
            route.update({PacketKind.REPACK_REGISTER: 2, PacketKind.REPACK_IN: 2})
        # The demultiplexer's own input slice stands for the port's slice: each beat's output
        # is decided on the way in, so the outputs' valid comes from a flop.
        m.submodules.rx_demux = demux = PacketDemux(self._data_width, route,
                                                    outputs=3 if hub_ports else 2, default=0,
                                                    input_slice=True)
        wiring.connect(m, wiring.flipped(self.net_rx), demux.i)
        # The barrier's notices go to its header receiver without a slice: the receiver is
        # always ready (the unit never waits), so a slice would cut nothing the demux's
        # flops do not, and the unit registers each notice at its own boundary (it was a
        # cycle of every tree hop, docs/barrier.md).
        wiring.connect(m, demux.o_0, barrier_rx)
        for k, port in enumerate([engine_rx] + ([hub_ports[1]] if hub_ports else []), start=1):
            rx_out = self._slice(m, f"rx_slice_{k}")
            wiring.connect(m, getattr(demux, f"o_{k}"), rx_out.i)
            wiring.connect(m, rx_out.o, port)

        # Values of the hardware-driven fields of the blocks NicCore drives, keyed by the
        # map's own names; every such field must be driven (drive_fields), so a field added
        # to the RDL cannot be left floating.  The engine drives its own (EngineBlock), the
        # barrier unit its (BarrierBlock), the repack hub its (RepackBlock).
        for name in ("global", "alu"):
            block = REGMAP.block(name)
            drive_fields(m, getattr(csr, name), block,
                         {(r, f): values.pop((b, r, f)) for b, r, f in list(values) if b == name})
        if values:
            raise NotImplementedError(f"register map lacks fields {sorted(values)}")
        return m

    def _slice(self, m, name, *, mux_output=False):
        """A register slice (:class:`~nicoll.hw.lib.skid.SkidBuffer`) of one packet stream, added
        to ``m`` as ``name``.

        Every stream that crosses between the core's blocks and its network ports goes
        through one, so no valid/ready chain runs from a block through the arbiter or the
        demultiplexer into another block or a port: ready and valid on each side come from
        flops.  A slice costs a cycle of latency, never throughput.
        """
        m.submodules[name] = skid = SkidBuffer(packet_beat_layout(self._data_width),
                                               mux_output=mux_output)
        return skid

    def _elaborate_hub(self, m, node_id):
        """The repack units and control tree with their registers; returns the hub's
        (tx, rx) packet ports, or None in a build without units (whose repack registers
        read 0)."""
        block = self._repack_block()
        if block is None:
            drive_fields(m, self.csr.repack, REGMAP.block("repack"), repack_block_idle_values())
            return None
        m.submodules.hub = block
        wiring.connect(m, self.csr.repack, block.csr)
        m.d.comb += block.node_id.eq(node_id)
        for k in range(self._repack_units if self._repack_unit_ports else 0):
            # A slice each way, as at the core's own port: ready and valid from flops.
            tx_slice = self._slice(m, f"unit_tx_slice_{k}")
            rx_slice = self._slice(m, f"unit_rx_slice_{k}")
            wiring.connect(m, block.unit_tx(k), tx_slice.i)
            wiring.connect(m, tx_slice.o, wiring.flipped(self.unit_tx(k)))
            wiring.connect(m, wiring.flipped(self.unit_rx(k)), rx_slice.i)
            wiring.connect(m, rx_slice.o, block.unit_rx(k))
        return block.tx, block.rx

    def _elaborate_engine(self, m, cycles, node_id):
        """The collective engine with its registers, and its memory ports; returns its
        packet ports and its barrier strobe (done, seq)."""
        m.submodules.engine = block = self._engine_block()
        devmem = self.devmem
        wiring.connect(m, self.csr.engine, block.csr)
        m.d.comb += [block.now.eq(cycles), block.node_id.eq(node_id)]
        wiring.connect(m, block.send_rd, devmem.send_rd)
        wiring.connect(m, block.local_rd, devmem.local_rd)
        wiring.connect(m, block.wr, devmem.engine_wr)
        return block.tx, block.rx, (block.barrier_done, block.barrier_done_seq)

    def _elaborate_barrier(self, m, cycles, node_id, engine_done):
        """The barrier unit with its registers and notice packets; returns its packet
        ports.  ``engine_done`` (strobe, seq) is the engine's completion of a barrier
        command."""
        m.submodules.barrier = block = self._barrier_block()
        wiring.connect(m, self.csr.barrier, block.csr)
        engine_strobe, engine_seq = engine_done
        m.d.comb += [block.now.eq(cycles), block.node_id.eq(node_id),
                     block.engine_done.eq(engine_strobe), block.engine_done_seq.eq(engine_seq),
                     self._engine.barrier_seq.eq(block.seq)]
        return block.tx, block.rx
