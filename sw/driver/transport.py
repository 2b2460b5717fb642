"""Transport: the bottom layer of the driver, one per node.

A transport moves 32-bit register words over the node's AXI4-Lite slave and bytes to and
from its device memory.  It knows nothing of register names: it returns the bus response
and leaves the interpretation to the layers above (:mod:`nicoll.driver.regs`,
:mod:`nicoll.driver.device`).  Each backend (device model, Amaranth simulator, Verilator)
provides one implementation; everything above it is the same code on every backend.
"""

import abc

from nicoll.hw.regmap import BusResponse

__all__ = ["Transport", "BusResponse"]


class Transport(abc.ABC):
    """Register and device-memory access to one node."""

    @abc.abstractmethod
    def read32(self, address: int) -> tuple[int, BusResponse]:
        """Read the 32-bit word at byte ``address``; return ``(data, response)``."""

    @abc.abstractmethod
    def write32(self, address: int, data: int, strobe: int = 0xF) -> BusResponse:
        """Write ``data`` to the word at byte ``address``; bit k of ``strobe`` enables byte k."""

    @abc.abstractmethod
    def mem_write(self, address: int, data: bytes) -> BusResponse:
        """Write ``data`` into device memory starting at byte ``address``."""

    @abc.abstractmethod
    def mem_read(self, address: int, length: int) -> tuple[bytes, BusResponse]:
        """Read ``length`` bytes of device memory starting at byte ``address``."""

    def mem_load(self, address: int, data: bytes) -> BusResponse:
        """Put ``data`` into device memory at byte ``address`` by the fastest way the backend
        has.  The simulators write their memory arrays directly, without bus cycles and in no
        simulated time; other transports use :meth:`mem_write`."""
        return self.mem_write(address, data)

    def mem_dump(self, address: int, length: int) -> tuple[bytes, BusResponse]:
        """Read ``length`` bytes of device memory at byte ``address`` by the fastest way the
        backend has (the counterpart of :meth:`mem_load`)."""
        return self.mem_read(address, length)

    def idle(self, cycles: int) -> None:
        """Let the device run ``cycles`` clock cycles with no bus traffic: how a driver waits
        between polls without spending a bus access per few cycles.  A simulator runs them
        at once; hardware and the device model run on their own, so this does nothing."""
