"""nicoll gateware: Amaranth components of the NIC core and of a simulated cluster.

The register map source (``regmap/nicoll.rdl``) lives here too; :mod:`nicoll.hw.regmap` compiles
it and :mod:`nicoll.hw.regmap.generated` holds the generated map the gateware reads.
"""

from .axi import AXI4LiteSignature, AXI4Signature, AXI4StreamSignature
from .cluster import ClusterTop, cluster_verilog, niccore_verilog
from .csr import CSRSlave
from .devmem import DeviceMemory
from .niccore import NicCore
from .packet import packet_beat_layout, packet_stream
from .skid import SkidBuffer
from .switch import Switch


__all__ = [
    "AXI4LiteSignature", "AXI4Signature", "AXI4StreamSignature",
    "packet_beat_layout", "packet_stream",
    "SkidBuffer", "CSRSlave", "DeviceMemory", "Switch", "NicCore",
    "ClusterTop", "cluster_verilog", "niccore_verilog",
]
