"""Cluster: N nicoll nodes on one backend, opened as Devices.

``nicoll.Cluster(nodes=8, backend="verilator")`` builds (or reuses a cached build of) the
simulated cluster, starts it, and opens every node through the same driver code whatever
the backend.  Use it as a context manager or call :meth:`Cluster.close`.
"""

from .config import BACKENDS, ClusterConfig, DEFAULT_MAX_NODES, DEFAULT_MEM_SIZE
from .device import Device
from .errors import NicollError

__all__ = ["Cluster"]


class _ModelBackend:
    """The device model: one ModelNode per rank, nothing to start or stop."""

    def __init__(self, config):
        from .model import ModelNode
        self._nodes = [ModelNode(node_id=rank, data_width=config.data_width,
                                 max_nodes=config.max_nodes, mem_size=config.mem_size,
                                 alu_capabilities=config.alu_capabilities)
                       for rank in range(config.nodes)]

    def transports(self):
        return list(self._nodes)

    def close(self):
        pass


def _start_backend(name, config, progress):
    if name == "model":
        return _ModelBackend(config)
    if name == "amaranth":
        from nicoll.sim.amaranth_backend import AmaranthCluster
        return AmaranthCluster(config)
    if name == "verilator":
        from nicoll.sim.verilator_backend import VerilatorCluster
        return VerilatorCluster(config, progress=progress)
    raise NicollError(f"unknown backend {name!r}; choose one of {', '.join(map(repr, BACKENDS))}")


class Cluster:
    """N nodes of one backend, each opened as a :class:`~nicoll.Device`.

    :param nodes: number of nodes, 1 .. ``max_nodes``.
    :param backend: ``"model"`` (Python device model), ``"amaranth"`` (the gateware in the
        Amaranth simulator) or ``"verilator"`` (its Verilog under Verilator and cocotb).
    :param data_width: width of the network streams and memory beats (64, 128, 256, 512).
    :param max_nodes: the largest cluster the gateware is built for.
    :param mem_size: bytes of device memory per node (a power of two).
    :param alu_capabilities: the (op, dtype) pairs the reduction ALU is built with, e.g.
        everything but ``("prod", "float64")`` to save DSPs; None for every pair MPI defines.
    :param progress: callable taking a one-line status message while a backend builds and
        starts (the command line shows it); None for silence.
    """

    def __init__(self, nodes=8, backend="model", *, data_width=256, max_nodes=DEFAULT_MAX_NODES,
                 mem_size=DEFAULT_MEM_SIZE, alu_capabilities=None, progress=None):
        if backend not in BACKENDS:
            raise NicollError(f"unknown backend {backend!r}; choose one of "
                              f"{', '.join(map(repr, BACKENDS))}")
        self.config = ClusterConfig(nodes=nodes, data_width=data_width, max_nodes=max_nodes,
                                    mem_size=mem_size, alu_capabilities=alu_capabilities)
        self.backend = backend
        self._backend = _start_backend(backend, self.config, progress)
        try:
            self._devices = [Device(t, rank=rank)
                             for rank, t in enumerate(self._backend.transports())]
        except BaseException:
            self._backend.close()
            raise
        self._closed = False

    @property
    def nodes(self):
        return self.config.nodes

    @property
    def data_width(self):
        return self.config.data_width

    @property
    def devices(self):
        self._check_open()
        return list(self._devices)

    def device(self, rank):
        """The :class:`~nicoll.Device` of node ``rank``."""
        self._check_open()
        if not isinstance(rank, int) or not 0 <= rank < self.nodes:
            raise NicollError(f"rank must be an int between 0 and {self.nodes - 1}, not {rank!r}")
        return self._devices[rank]

    def _check_open(self):
        if self._closed:
            raise NicollError("this cluster is closed")

    def close(self):
        if not getattr(self, "_closed", True):
            self._closed = True
            self._backend.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        state = "closed" if self._closed else "open"
        return (f"<nicoll.Cluster {self.nodes} nodes on {self.backend}, "
                f"data_width {self.data_width}, {state}>")
