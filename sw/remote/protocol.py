"""The wire format between a cluster server and its per-rank clients.

Every message is one frame: a 4-byte big-endian length, then that many bytes of UTF-8 JSON
(an object), then, when the object has ``"bytes": n``, ``n`` bytes of raw payload (device
memory going either way).  A request names its operation in ``"op"``; the reply carries
``"ok": true`` and the operation's results, or ``"ok": false`` and ``"error"``, a sentence
naming the problem.  Frames are bounded (:data:`MAX_HEADER_BYTES`, :data:`MAX_PAYLOAD_BYTES`)
so a malformed or hostile peer cannot make the other side allocate without limit.

Operations (all but ``hello`` act on the rank the connection was opened for):

- ``hello`` (``rank``, ``token``): claim a rank; the reply gives ``nodes`` and
  ``backend``.
- ``bye``: the client is closing the connection (no reply).  A connection that ends without
  one is a client that died (:class:`~nicoll.remote.server.ClusterServer`, faults).
- ``read32`` (``address``) → ``data``, ``resp``; ``write32`` (``address``, ``data``,
  ``strobe``) → ``resp``: a register word and its AXI response.
- ``mem_write`` / ``mem_load`` (``address``, payload) → ``resp``; ``mem_read`` /
  ``mem_dump`` (``address``, ``length``) → ``resp`` and the payload: device memory, over the
  bus or by the backend's fastest way (:class:`nicoll.driver.transport.Transport`).
- ``idle`` (``cycles``): let the backend run that many cycles; the reply carries
  ``gone``, the ranks whose clients died during this connection's run, when there are any.
- ``start`` (``budget_ms``): this rank has posted its part of a collective.  The reply
  comes when every rank has (the server then arms every engine for one start cycle, as
  :class:`nicoll.Cluster` does, and the reply gives it as ``start``), or, after
  ``budget_ms`` without that, as an error naming the ranks that have not; at once, as an
  error with ``gone``, when a client of this connection's run has died.
- ``barrier`` (``seq``, ``mode``, ``sub``, ``m``, ``c``, ``estimate``): this rank is about
  to signal done for barrier ``seq`` and asks that the root's decision unit run it in
  ``mode`` (the register value: 0 normal, 1 AC) with sub-mode ``sub`` (1 count, 2 time,
  3 both), thresholds ``m`` and ``c`` and ``estimate``.  The first rank to ask for a
  barrier has the server program the root before it replies; a later rank asking for the
  same barrier otherwise is refused, naming both (:class:`~nicoll.remote.server.ClusterServer`).
"""

import json
import struct

from ..errors import NicollError

__all__ = ["MAX_HEADER_BYTES", "MAX_PAYLOAD_BYTES", "OPERATIONS", "send_frame", "recv_frame"]

#: Largest JSON part of a frame.
MAX_HEADER_BYTES = 1 << 16
#: Largest payload of a frame (device memory moved in one request).
MAX_PAYLOAD_BYTES = 1 << 28
#: The operations a server serves, with the integer fields each one needs.
OPERATIONS = {
    "hello": ("rank",),
    "bye": (),
    "read32": ("address",),
    "write32": ("address", "data", "strobe"),
    "mem_write": ("address",),
    "mem_load": ("address",),
    "mem_read": ("address", "length"),
    "mem_dump": ("address", "length"),
    "idle": ("cycles",),
    "start": ("budget_ms",),
    "barrier": ("seq", "mode", "sub", "m", "c", "estimate"),
}

_LENGTH = struct.Struct(">I")


def send_frame(sock, message, payload=b""):
    """Send ``message`` (a dict) and ``payload`` as one frame."""
    if payload:
        message = dict(message, bytes=len(payload))
    header = json.dumps(message).encode()
    sock.sendall(_LENGTH.pack(len(header)) + header + bytes(payload))


def recv_frame(sock):
    """``(message, payload)`` of the next frame; None when the peer closed before one
    began.  A frame that breaks the format raises NicollError naming how."""
    prefix = _recv_exactly(sock, _LENGTH.size, allow_eof=True)
    if prefix is None:
        return None
    (length,) = _LENGTH.unpack(prefix)
    if length > MAX_HEADER_BYTES:
        raise NicollError(f"a frame's header of {length} bytes is over the limit of "
                          f"{MAX_HEADER_BYTES}")
    try:
        message = json.loads(_recv_exactly(sock, length).decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NicollError(f"a frame's header is not JSON: {exc}") from None
    if not isinstance(message, dict):
        raise NicollError(f"a frame's header must be a JSON object, not {type(message).__name__}")
    size = message.get("bytes", 0)
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_PAYLOAD_BYTES:
        raise NicollError(f"a frame's payload size must be an integer from 0 to "
                          f"{MAX_PAYLOAD_BYTES}, not {size!r}")
    return message, _recv_exactly(sock, size) if size else b""


def _recv_exactly(sock, n, allow_eof=False):
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            if allow_eof and got == 0:
                return None
            raise NicollError(f"the connection closed inside a frame ({got} of {n} bytes)")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
