"""nicoll gateware: Amaranth components of the NIC core and of a simulated cluster.

The register map source (``regmap/nicoll.rdl``) lives here too; :mod:`nicoll.hw.regmap` compiles
it and :mod:`nicoll.hw.regmap.generated` holds the generated map the gateware reads.
"""

from .bus.axi import AXI4LiteSignature, AXI4Signature, AXI4StreamSignature
from .sim.cluster import ClusterTop, cluster_verilog, niccore_verilog
from .bus.csr import CSRSlave
from .bus.devmem import DeviceMemory
from .core import NicCore
from .net.packet import packet_beat_layout, packet_stream
from .lib.skid import SkidBuffer
from .net.switch import Switch


__all__ = [
    "AXI4LiteSignature", "AXI4Signature", "AXI4StreamSignature",
    "packet_beat_layout", "packet_stream",
    "SkidBuffer", "CSRSlave", "DeviceMemory", "Switch", "NicCore",
    "ClusterTop", "cluster_verilog", "niccore_verilog",
]
