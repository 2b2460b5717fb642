"""Ranks as processes (issue 21): a running cluster served over a socket
(:class:`~nicoll.remote.server.ClusterServer`, ``nicoll serve``) and each rank's
:class:`nicoll.Device` in its own process (:func:`~nicoll.remote.client.connect`).  Today the
server serves each rank's node at the driver's bottom layer, the transport, and a
:class:`~nicoll.remote.rank.Rank` posts the rank's own part of a collective on it; the mpi4py
front builds on them."""

from .client import ADDRESS_ENV, SocketTransport, connect
from .rank import Rank, RankBarrierResult
from .server import ClusterServer, parse_address

__all__ = ["ADDRESS_ENV", "ClusterServer", "Rank", "RankBarrierResult", "SocketTransport", "connect",
           "parse_address"]
