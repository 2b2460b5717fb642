"""Ranks as processes (issue 21): a running cluster served over a socket
(:class:`~nicoll.remote.server.ClusterServer`, ``nicoll serve``) and each rank's
:class:`nicoll.Device` in its own process (:func:`~nicoll.remote.client.connect`).  Today the
server serves each rank's node at the driver's bottom layer, the transport; the per-rank
collectives and the mpi4py front build on it."""

from .client import ADDRESS_ENV, SocketTransport, connect
from .server import ClusterServer, parse_address

__all__ = ["ADDRESS_ENV", "ClusterServer", "SocketTransport", "connect", "parse_address"]
