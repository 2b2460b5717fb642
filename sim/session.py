"""What the simulated backends share: the request protocol and the transport over it.

A simulated cluster (Amaranth simulator or Verilator) runs every node in one simulation.
The driver reaches it through :class:`SimTransport`, one per node, which turns each
transport call into a request ``(op, node, *args)`` handled by the backend's server loop
inside the simulation.  Simulated time advances only while a request runs, so cycle counts
are deterministic for a given sequence of requests.
"""

import abc
import os

from nicoll.errors import NicollError
from nicoll.hw.regmap import BusResponse
from nicoll.driver.transport import Transport

__all__ = ["SimCluster", "SimTransport", "OPS", "reply_budget", "split_strobe", "rows_for_load",
           "bytes_from_rows"]

#: The requests a server loop answers, and what each returns.
OPS = {
    "read32": "(node, address) -> (data, response)",
    "write32": "(node, address, data, strobe) -> response",
    "mem_write": "(node, address, data) -> response",
    "mem_read": "(node, address, length) -> (data, response)",
    # Backdoor: straight into / out of the simulated memory array, in no simulated time.
    "mem_load": "(node, address, data) -> response",
    "mem_dump": "(node, address, length) -> (data, response)",
    # Let the whole cluster run this many cycles with no host traffic (a wait between polls).
    "idle": "(node, cycles) -> None",
}


def reply_budget():
    """Seconds of wall time one request may take before the driver gives up on the simulator.

    A register access takes microseconds; the budget only catches a dead or hung simulator.
    Override with the NICOLL_SIM_TIMEOUT environment variable.
    """
    return float(os.environ.get("NICOLL_SIM_TIMEOUT", "600"))


def split_strobe(strobe):
    """Runs of enabled byte lanes of a 4-bit strobe, as (first byte, end byte) pairs.

    For bus models that express a partial write by its byte range rather than a strobe.
    """
    runs, start = [], None
    for k in range(5):
        on = k < 4 and bool(strobe >> k & 1)
        if on and start is None:
            start = k
        elif not on and start is not None:
            runs.append((start, k))
            start = None
    return runs


def rows_for_load(address, data, row_bytes, read_row):
    """The memory rows that hold ``data`` once written at byte ``address``, as ``(row, value)``
    pairs (value: the row as a little-endian integer).

    A row only partly covered keeps its other bytes: ``read_row(row)`` gives its present value.
    """
    end = address + len(data)
    out = []
    for row in range(address // row_bytes, -(-end // row_bytes)):
        base = row * row_bytes
        lo, hi = max(address, base), min(end, base + row_bytes)
        if lo == base and hi == base + row_bytes:
            raw = data[lo - address:hi - address]
        else:
            old = bytearray(read_row(row).to_bytes(row_bytes, "little"))
            old[lo - base:hi - base] = data[lo - address:hi - address]
            raw = old
        out.append((row, int.from_bytes(raw, "little")))
    return out


def bytes_from_rows(address, length, row_bytes, read_row):
    """``length`` bytes of memory from byte ``address``, read row by row with ``read_row``."""
    if length == 0:
        return b""
    first, last = address // row_bytes, (address + length - 1) // row_bytes
    raw = b"".join(read_row(row).to_bytes(row_bytes, "little") for row in range(first, last + 1))
    skip = address - first * row_bytes
    return raw[skip:skip + length]


class SimCluster(abc.ABC):
    """A running simulation of a whole cluster, answering requests."""

    nodes: int
    #: Cycle counts are the simulation's (the engines' and barrier units' counters).
    timed = True
    #: Whether :meth:`trace_start` / :meth:`trace_stop` record the activity lanes.
    traces = False

    def trace_start(self):
        """Start recording every node's activity lanes (nicoll.cluster.TRACE_LANES, read
        from the cluster top's ``n<i>_activity`` ports)."""
        raise NicollError(f"{type(self).__name__} records no activity trace")

    def trace_stop(self):
        """Stop recording; ``{node: {lane: [(first, end), ...]}}`` in cycles of node 0's
        counter."""
        raise NicollError(f"{type(self).__name__} records no activity trace")

    @abc.abstractmethod
    def reset(self):
        """Hold the whole simulated cluster in reset for a few cycles, as at power-on: every
        register and flop of the cores, the switch and the links goes back to its initial
        value; device memory keeps its contents."""

    @abc.abstractmethod
    def faults_set(self, config):
        """Drive the fault injectors' configuration port (``config``: the bytes of a value of
        :func:`nicoll.hw.sim.faults.fault_config_layout`, little endian)."""

    @abc.abstractmethod
    def faults_get(self):
        """The bytes of the links' counters port (little endian)."""

    def _check_faults(self):
        if not self.config.faults:
            raise NicollError("this cluster was built without fault injection; open it with "
                              "faults=nicoll.Faults(...)")

    @abc.abstractmethod
    def request(self, op, node, *args):
        """Run one request in the simulation and return its result (raises NicollError)."""

    @abc.abstractmethod
    def close(self):
        """End the simulation; further requests raise NicollError."""

    def transports(self):
        return [SimTransport(self, node) for node in range(self.nodes)]

    def _check_request(self, op, node):
        if op not in OPS:
            raise NicollError(f"unknown simulator request {op!r}; known: {sorted(OPS)}")
        if not 0 <= node < self.nodes:
            raise NicollError(f"node {node!r} outside the simulated cluster of {self.nodes}")


class SimTransport(Transport):
    """Transport to one node of a simulated cluster."""

    def __init__(self, cluster, node):
        self.cluster = cluster
        self.node = node

    def read32(self, address):
        data, response = self.cluster.request("read32", self.node, address)
        return data, BusResponse(response)

    def write32(self, address, data, strobe=0xF):
        return BusResponse(self.cluster.request("write32", self.node, address, data, strobe))

    def mem_write(self, address, data):
        return BusResponse(self.cluster.request("mem_write", self.node, address, bytes(data)))

    def mem_read(self, address, length):
        data, response = self.cluster.request("mem_read", self.node, address, length)
        return bytes(data), BusResponse(response)

    def mem_load(self, address, data):
        return BusResponse(self.cluster.request("mem_load", self.node, address, bytes(data)))

    def mem_dump(self, address, length):
        data, response = self.cluster.request("mem_dump", self.node, address, length)
        return bytes(data), BusResponse(response)

    def idle(self, cycles):
        self.cluster.request("idle", self.node, int(cycles))
