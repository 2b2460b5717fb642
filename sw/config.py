"""Build parameters of a cluster, checked once for every backend."""

from dataclasses import dataclass
import hashlib

from nicoll.hw.core import CoreParams
from nicoll.hw.params import DATA_WIDTHS

from .errors import NicollError
from .fabric import SimLinks

__all__ = ["ClusterConfig", "BACKENDS", "DATA_WIDTHS", "DEFAULT_MEM_SIZE", "DEFAULT_MAX_NODES",
           "DEFAULT_SIM_ALU_CAPABILITIES", "build_defaults"]

#: Device backends, fastest first.
BACKENDS = ("model", "amaranth", "verilator")
DEFAULT_MEM_SIZE = 1 << 20
#: max_nodes of a Cluster that names none: this or the node count, whichever is larger.  (The
#: gateware's tables grow with it; a cluster built for 64 nodes simulates 8 more slowly.)
DEFAULT_MAX_NODES = 8
#: The ALU pairs a simulated cluster is built with when none are named: each float adder or
#: multiplier adds minutes to a Verilator build and cost to every simulated cycle.
DEFAULT_SIM_ALU_CAPABILITIES = (("sum", "float32"),)


def build_defaults(backend, nodes, max_nodes, alu_capabilities):
    """``(max_nodes, alu_capabilities)`` of a :class:`nicoll.Cluster` call: None for max_nodes
    gives the larger of :data:`DEFAULT_MAX_NODES` and ``nodes``; None for the ALU pairs gives
    every pair on the model and :data:`DEFAULT_SIM_ALU_CAPABILITIES` on the simulators;
    ``"all"`` gives every pair (the config's None)."""
    if max_nodes is None:
        max_nodes = max(DEFAULT_MAX_NODES, nodes) if isinstance(nodes, int) else nodes
    if alu_capabilities is None:
        alu_capabilities = None if backend == "model" else DEFAULT_SIM_ALU_CAPABILITIES
    elif isinstance(alu_capabilities, str):
        if alu_capabilities != "all":
            raise NicollError(f"alu_capabilities must be (op, dtype) pairs, 'all' or None, "
                              f"not {alu_capabilities!r}")
        alu_capabilities = None
    return max_nodes, alu_capabilities


def _int(name, value):
    if not isinstance(value, int) or isinstance(value, bool):
        raise NicollError(f"{name} must be an int, not {value!r}")
    return value


@dataclass(frozen=True)
class ClusterConfig:
    nodes: int
    data_width: int = 256
    max_nodes: int = 64
    mem_size: int = DEFAULT_MEM_SIZE
    #: (op, dtype) pairs the ALU computes, as a sorted tuple of (ReduceOp, DType); None: all
    #: pairs MPI defines.  Given as any iterable of (op name, numpy dtype) pairs.
    alu_capabilities: tuple | None = None
    #: Repack units (seed 003) that serve the cluster's aggregate exchanges: node 0's, or
    #: with ``repack_node`` those of a node of their own.  0 builds none (algorithm
    #: "aggregate" is then refused).
    repack_units: int = 1
    #: The repack units in the switch (seed 003 places them there): their control tree on
    #: a node after the ranks (node id ``nodes``), each unit on a switch port of its own,
    #: so that node 0 is an ordinary rank; False: on node 0's port.
    repack_node: bool = False
    #: The fabric between the NICs and the switch in cycles (:meth:`nicoll.Fabric.sim_links`);
    #: the default builds no links (the ``"ideal"`` fabric).
    links: SimLinks = SimLinks()
    #: Build a fault injector, with a CRC before it and a CRC check after it, on each direction
    #: of every switch port (:class:`nicoll.Faults`, docs/faults.md); on the model, links that
    #: draw the same faults for its messages (:mod:`nicoll.model.faults`).
    faults: bool = False

    def __post_init__(self):
        if self.alu_capabilities is not None:
            from .ops import check_op_dtype
            try:
                pairs = {check_op_dtype(op, dtype) for op, dtype in self.alu_capabilities}
            except (TypeError, ValueError) as exc:
                raise NicollError(f"alu_capabilities must be (op, dtype) pairs such as "
                                  f"('sum', 'float32'): {exc}") from None
            object.__setattr__(self, "alu_capabilities",
                               tuple(sorted(pairs, key=lambda p: (p[1].value, p[0].value))))
        _int("nodes", self.nodes)
        # The limits of a build are the gateware's (one check, nicoll.hw.core.CoreParams),
        # given as NicollError like every refusal of the driver.
        try:
            self.core_params()
        except (TypeError, ValueError) as exc:
            raise NicollError(str(exc)) from None
        if not isinstance(self.repack_node, bool):
            raise NicollError(f"repack_node must be a bool, not {self.repack_node!r}")
        if not isinstance(self.faults, bool):
            raise NicollError(f"faults must be a bool, not {self.faults!r}")
        if self.repack_node and not self.repack_units:
            raise NicollError("repack_node needs repack units (repack_units >= 1)")
        if not 1 <= self.nodes <= self.max_nodes:
            raise NicollError(f"nodes must be between 1 and max_nodes={self.max_nodes}, "
                              f"not {self.nodes!r}")
        if self.hw_nodes > self.max_nodes:
            raise NicollError(f"the repack node takes node id {self.nodes}: nodes + 1 = "
                              f"{self.hw_nodes} must be at most max_nodes={self.max_nodes}")

    @property
    def hw_nodes(self):
        """The simulated cluster's NIC cores: the ranks, and the repack node if any."""
        return self.nodes + int(self.repack_node)

    @property
    def hub(self):
        """The node id of the repack units serving the cluster."""
        return self.nodes if self.repack_node else 0

    def core_params(self):
        """The build of each node as :class:`nicoll.hw.core.CoreParams` (checked)."""
        return CoreParams(data_width=self.data_width, max_nodes=self.max_nodes,
                          mem_size=self.mem_size, alu_capabilities=self.alu_capabilities,
                          repack_units=self.repack_units)

    def hw_kwargs(self):
        """Keyword arguments for the gateware constructors (the links only when there are
        any, so an ideal cluster's Verilog is the one it was before links existed)."""
        links = {} if self.links.ideal else dict(
            uplink_latency=self.links.uplink, downlink_latency=self.links.downlink,
            link_gap=self.links.gap)
        return dict(nodes=self.nodes, data_width=self.data_width,
                    max_nodes=self.max_nodes, mem_size=self.mem_size,
                    alu_capabilities=self.alu_capabilities, repack_units=self.repack_units,
                    **({"repack_node": True} if self.repack_node else {}),
                    **({"faults": True} if self.faults else {}), **links)

    def slug(self):
        """A short name for build folders."""
        slug = f"n{self.nodes}_w{self.data_width}_m{self.max_nodes}_mem{self.mem_size}"
        if self.alu_capabilities is not None:
            names = repr([(op.name, dtype.name) for op, dtype in self.alu_capabilities])
            slug += "_alu" + hashlib.sha256(names.encode()).hexdigest()[:8]
        if self.repack_units != 1:
            slug += f"_rp{self.repack_units}"
        if self.repack_node:
            slug += "_rn"
        if self.faults:
            slug += "_faults"
        return slug + self.links.slug()
