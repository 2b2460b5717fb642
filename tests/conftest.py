"""Configurations several test files share, so each Verilator cluster is built once."""

from nicoll.hw.alu import all_capabilities
from nicoll.hw.ops import DType, ReduceOp

#: A build without float64 prod, as a small FPGA would be configured to save DSPs.
ALU_CAPABILITIES = all_capabilities() - {(ReduceOp.PROD, DType.FLOAT64)}

#: Nodes of the cluster each backend opens for the driver and barrier tests: the simulators
#: in Python get a small cluster, Verilator a binary tree of depth 3.
NODES = {"model": 8, "amaranth": 3, "verilator": 8}

#: The cluster keyword arguments (besides nodes and backend) of those tests.
CLUSTER_KWARGS = dict(data_width=256, max_nodes=64, mem_size=4096,
                      alu_capabilities=ALU_CAPABILITIES)
