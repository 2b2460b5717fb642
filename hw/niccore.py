# Ref: AMBA AXI and ACE Protocol Specification (IHI0022E) for s_axil / s_axi;
#      AMBA 4 AXI4-Stream Protocol Specification (IHI0051A) for net_tx / net_rx.
"""One nicoll NIC core: registers, device memory and network ports of a node.

This is the foundation the collective engine grows on: the core answers its register map
(:class:`~nicoll.hw.csr.CSRSlave`), gives the host its device memory
(:class:`~nicoll.hw.devmem.DeviceMemory`) and counts cycles.  No engine is attached yet, so
nothing is sent (``net_tx.valid`` is 0) and nothing is accepted (``net_rx.ready`` is 0): a
packet addressed to this node waits at the switch.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .._regmap import REGMAP
from .alu import capability_masks, check_capabilities
from .axi import AXI4LiteSignature, AXI4Signature
from .csr import CSRSlave
from .devmem import DeviceMemory
from .packet import DEST_WIDTH, packet_stream


__all__ = ["NicCore", "check_core_params"]


#: Data widths of the network streams and of device memory beats (register DATA_WIDTH).
DATA_WIDTHS = (64, 128, 256, 512)
#: Width of the register bus address: the register map needs fewer bits, the rest is room.
CSR_ADDR_WIDTH = 16
#: Width of the host port's byte address and ID.
AXI_ADDR_WIDTH = 32
AXI_ID_WIDTH = 8
#: Node ids are DEST_WIDTH bits wide; the largest cluster leaves no id unused but none spare.
MAX_NODES_LIMIT = (1 << DEST_WIDTH) - 1
#: MEM_SIZE is a 32-bit register and the size a power of two, so 2 GiB is the largest.
MEM_SIZE_LIMIT = 1 << 31


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def check_core_params(*, data_width, max_nodes, mem_size):
    """Check the build parameters of a NIC core; raise TypeError / ValueError naming them."""
    if not _is_int(data_width):
        raise TypeError(f"data_width must be an integer, not {data_width!r}")
    if data_width not in DATA_WIDTHS:
        raise ValueError(f"data_width must be one of {', '.join(map(str, DATA_WIDTHS))}, "
                         f"not {data_width!r}")
    if not _is_int(max_nodes):
        raise TypeError(f"max_nodes must be an integer, not {max_nodes!r}")
    if not 1 <= max_nodes <= MAX_NODES_LIMIT:
        raise ValueError(f"max_nodes must be between 1 and {MAX_NODES_LIMIT}, not {max_nodes!r}")
    if not _is_int(mem_size):
        raise TypeError(f"mem_size must be an integer, not {mem_size!r}")
    beat_bytes = data_width // 8
    if (mem_size <= 0 or mem_size & (mem_size - 1) or mem_size % beat_bytes
            or mem_size > MEM_SIZE_LIMIT):
        raise ValueError(f"mem_size must be a power of two, a multiple of {beat_bytes} bytes "
                         f"(data_width / 8) and at most {MEM_SIZE_LIMIT}, not {mem_size!r}")


class NicCore(wiring.Component):
    """A nicoll NIC core.

    Parameters
    ----------
    data_width : int
        Bits per beat of the network streams and of the device memory: 64, 128, 256 or 512.
    max_nodes : int
        Largest cluster this build joins, 1..65535 (reported in MAX_NODES).
    mem_size : int
        Bytes of device memory (reported in MEM_SIZE).
    alu_capabilities : set of (ReduceOp, DType) or None
        The pairs the reduction ALU of this build computes (reported in the ALU block's
        OPS_<TYPE> registers); None for every pair MPI defines.

    Members
    -------
    s_axil : ``In(AXI4LiteSignature(16))``
        Register bus (the map of :mod:`nicoll._regmap`).
    s_axi : ``In(AXI4Signature(addr_width=32, data_width=data_width, id_width=8))``
        Host port to the device memory, at byte address 0.
    net_tx : ``Out(packet_stream(data_width))``
        Packets this node sends; ``dest`` names the receiving node.
    net_rx : ``In(packet_stream(data_width))``
        Packets this node receives.
    node_id : ``In(16)``
        This node's id (its rank), strapped by the system; read back in NODE_ID.

    Attributes
    ----------
    csr : :class:`~nicoll.hw.csr.CSRSlave`
    devmem : :class:`~nicoll.hw.devmem.DeviceMemory`
        The device memory; ``devmem.data`` gives simulation testbenches its rows.  Both are
        built on first use (at the latest by :meth:`elaborate`), so a core that is only
        inspected leaves no unused elaboratable behind.
    """

    def __init__(self, *, data_width=256, max_nodes=64, mem_size=65536, alu_capabilities=None):
        check_core_params(data_width=data_width, max_nodes=max_nodes, mem_size=mem_size)
        self.alu_capabilities = check_capabilities(alu_capabilities)
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
        })
        self._csr = None
        self._devmem = None

    @property
    def csr(self):
        if self._csr is None:
            self._csr = CSRSlave(REGMAP, addr_width=CSR_ADDR_WIDTH)
        return self._csr

    @property
    def devmem(self):
        if self._devmem is None:
            self._devmem = DeviceMemory(self._mem_size, self._data_width,
                                        addr_width=AXI_ADDR_WIDTH, id_width=AXI_ID_WIDTH)
        return self._devmem

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

        # Values of the hardware-driven fields, keyed by the map's own names; every such
        # field of the map must be driven here, so a field added to the RDL cannot be left
        # floating.
        values = {
            ("global", "DATA_WIDTH", "bits"):  self._data_width,
            ("global", "MAX_NODES", "count"):  self._max_nodes,
            ("global", "NODE_ID", "id"):       self.node_id,
            ("global", "MEM_SIZE", "bytes"):   self._mem_size,
            ("global", "CYCLES", "count"):     cycles,
        }
        for dtype, mask in capability_masks(self.alu_capabilities).items():
            values["alu", f"OPS_{dtype.name}", "ops"] = mask
        for block in REGMAP.blocks:
            for reg in block.registers:
                for field in reg.fields:
                    if not field.hw_driven:
                        continue
                    key = (block.name, reg.name, field.name)
                    if key not in values:
                        raise NotImplementedError(f"NicCore does not drive field "
                                                  f"{'.'.join(key)} of the register map")
                    port = getattr(csr, CSRSlave.port_name(*key))
                    m.d.comb += port.eq(values.pop(key))
        if values:
            raise NotImplementedError(f"register map lacks fields {sorted(values)}")

        # No engine yet: nothing is sent and nothing is accepted.
        m.d.comb += [
            self.net_tx.valid.eq(0),
            self.net_rx.ready.eq(0),
        ]
        return m
