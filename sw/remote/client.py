"""A rank's side of a cluster server: :func:`connect` gives that rank's :class:`nicoll.Device`
over :class:`SocketTransport`, so the driver's layers run in the rank's own process."""

import os
import socket
import weakref

from nicoll.hw.regmap import BusResponse
from ..driver.device import Device
from ..driver.transport import Transport
from ..errors import NicollError
from .protocol import recv_frame, send_frame
from .server import parse_address

__all__ = ["ADDRESS_ENV", "SocketTransport", "connect"]

#: The environment variable :func:`connect` reads the server's address from when none is
#: given, so a program switches to a server by its environment alone.
ADDRESS_ENV = "NICOLL_ADDRESS"


class SocketTransport(Transport):
    """One rank's transport to a :class:`~nicoll.remote.server.ClusterServer`.  Every call
    waits at most ``timeout`` seconds for its reply; a server that stops or dies ends the
    call with NicollError.  :meth:`close` (also run when the process exits normally, or
    the transport is garbage-collected) says ``bye``, so the server tells a client that
    closed from one that died."""

    def __init__(self, address, rank, *, token=None, timeout=60.0):
        kind, where = parse_address(address)
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
            raise NicollError(f"rank must be a non-negative integer, not {rank!r}")
        family = (socket.AF_UNIX if kind == "unix"
                  else socket.AF_INET6 if ":" in where[0] else socket.AF_INET)
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        self._timeout = timeout
        self.address, self.rank = address, rank
        try:
            self._sock.connect(where)
        except OSError as exc:
            self._sock.close()
            raise NicollError(f"cannot reach the cluster server at {address}: {exc}") from None
        # Not a method of self: the finalizer must not keep the transport alive.
        self._goodbye = weakref.finalize(self, _goodbye, self._sock)
        #: Ranks whose clients the server has seen die during this connection's run, as of
        #: the last :meth:`idle` (:class:`~nicoll.remote.server.ClusterServer`, faults).
        self.gone = ()
        hello = {"op": "hello", "rank": rank}
        if token is not None:
            hello["token"] = token
        reply, _ = self._call(hello)
        #: Ranks of the served cluster, and its backend's name.
        self.nodes = reply["nodes"]
        self.backend = reply.get("backend")

    def _call(self, message, payload=b""):
        try:
            send_frame(self._sock, message, payload)
            frame = recv_frame(self._sock)
        except socket.timeout:
            raise NicollError(f"rank {self.rank}: no reply from the cluster server at "
                              f"{self.address} within {self._timeout} s") from None
        except OSError as exc:
            raise NicollError(f"rank {self.rank}: the connection to the cluster server at "
                              f"{self.address} failed: {exc}") from None
        if frame is None:
            raise NicollError(f"rank {self.rank}: the cluster server at {self.address} closed "
                              f"the connection")
        reply, data = frame
        if not reply.get("ok"):
            raise NicollError(f"rank {self.rank}: the cluster server refused "
                              f"{message.get('op')!r}: {reply.get('error')}")
        return reply, data

    def read32(self, address):
        reply, _ = self._call({"op": "read32", "address": address})
        return reply["data"], BusResponse(reply["resp"])

    def write32(self, address, data, strobe=0xF):
        reply, _ = self._call({"op": "write32", "address": address, "data": data,
                               "strobe": strobe})
        return BusResponse(reply["resp"])

    def mem_write(self, address, data):
        return BusResponse(self._call({"op": "mem_write", "address": address}, data)[0]["resp"])

    def mem_load(self, address, data):
        return BusResponse(self._call({"op": "mem_load", "address": address}, data)[0]["resp"])

    def mem_read(self, address, length):
        reply, data = self._call({"op": "mem_read", "address": address, "length": length})
        return data, BusResponse(reply["resp"])

    def mem_dump(self, address, length):
        reply, data = self._call({"op": "mem_dump", "address": address, "length": length})
        return data, BusResponse(reply["resp"])

    def idle(self, cycles):
        reply, _ = self._call({"op": "idle", "cycles": cycles})
        self.gone = tuple(reply.get("gone", ()))

    def start(self, budget_s):
        """This rank has posted its part of a collective: wait (at most ``budget_s``) until
        every rank has, when the server arms every engine for one cycle; returns it."""
        budget_ms = max(1, int(budget_s * 1000))
        previous = self._sock.gettimeout()
        self._sock.settimeout(budget_s + self._timeout)    # the server answers by the budget
        try:
            return self._call({"op": "start", "budget_ms": budget_ms})[0]["start"]
        finally:
            self._sock.settimeout(previous)

    def barrier(self, seq, mode, sub, m, c, estimate):
        """This rank is about to signal done for barrier ``seq``: the root's decision unit is
        to run it in ``mode`` (a :data:`~nicoll.driver.barrier.MODES` value) with sub-mode
        ``sub``, thresholds ``m``, ``c`` and ``estimate`` (0 for those not used).  Returns
        once the root holds them; refused when another rank asked for other settings."""
        self._call({"op": "barrier", "seq": seq, "mode": mode, "sub": sub, "m": m, "c": c,
                    "estimate": estimate})

    def close(self):
        """Say ``bye`` and close: the rank is free for another client (once only)."""
        self._goodbye()


def _goodbye(sock):
    try:
        send_frame(sock, {"op": "bye"})
    except OSError:
        pass                                    # the server has gone already
    sock.close()


def connect(address=None, rank=0, *, token=None, timeout=60.0):
    """Rank ``rank``'s :class:`nicoll.Device` on the cluster server at ``address``
    (``"unix:PATH"`` or ``"tcp:HOST:PORT"``; None: the environment's ``NICOLL_ADDRESS``).
    ``device.transport.close()`` frees the rank for another client."""
    if address is None:
        address = os.environ.get(ADDRESS_ENV)
        if not address:
            raise NicollError(f"no cluster server address given, and {ADDRESS_ENV} is not set")
    transport = SocketTransport(address, rank, token=token, timeout=timeout)
    try:
        return Device(transport, rank=rank)
    except BaseException:
        transport.close()
        raise
