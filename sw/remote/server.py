"""A running cluster served to per-rank clients over a socket (issue 21, its first layer).

:class:`ClusterServer` holds a :class:`nicoll.Cluster` and lets one client per rank drive that
rank's node through the driver's bottom layer, the transport (:mod:`nicoll.remote.protocol`
is the wire format, :func:`nicoll.remote.connect` the client).  Every layer above the transport
(registers, block drivers, :class:`nicoll.Device`) runs in the client, the same code as in a
single process.

- One client per rank: a second client for a rank that is taken is refused, naming it; a
  client that disconnects (or dies) frees its rank.
- Loopback by default.  A listening address off the loopback needs a token, which every
  client must present in its ``hello``.
- The backend is driven by one request at a time (a lock), whatever the clients do; a
  client that stalls inside a frame holds only its own connection.
- A malformed frame ends that connection with an error reply; the server and the other
  connections carry on.
- The collectives' rendezvous: each rank posts its own part of a collective (its input and
  its schedule, through its transport), then asks to ``start``; when the last rank asks, the
  server arms every engine for one start cycle, as :class:`nicoll.Cluster` does (an engine
  that clears its queue also forgets the clear-to-send a peer that started early sent it,
  so the engines must not start one by one).  A rank that waits longer than its budget, or
  whose client goes away, leaves the rendezvous; the others' waits name the ranks missing.
- A client that dies (faults, below) ends the run it was part of, promptly, for the others.
- The barriers' decision mode (seed 004): only the root's unit decides when a barrier is
  released, by its MODE, M, C and ESTIMATE registers, and they must hold the barrier's mode
  before the first completion of it reaches the root, whichever rank that is (the root's
  rank may be the straggler an AC barrier is there to skip).  So each rank asks
  (``barrier``) before it signals done, and the first to ask for a barrier has the server
  program the root (a rank's own transport reaches only its own node).  Every later rank
  must ask for the same mode, thresholds and estimate, or is refused naming both; a normal
  barrier after an AC one puts the root back in normal mode before any rank can complete
  it, so an AC threshold never releases a normal barrier early.

Faults: a client that goes away.  A client ends its connection with a ``bye`` (its
transport's ``close``, also run when its process exits normally); a connection of a rank
that ends without one is a client that died (killed, crashed, ``os._exit``).  Every
connection opened before that death belongs to the same run as the dead client, and that
run cannot complete another collective or a normal barrier: so, until the server is
stopped, such a connection's

- ``start`` is refused at once, naming the dead ranks, and a ``start`` already waiting in
  the rendezvous ends at once the same way (not at its budget);
- ``barrier`` for a normal barrier is refused the same way (an AC barrier goes on: it is
  there to release without the ranks missing);
- ``idle`` replies carry ``gone``, the dead ranks, so a rank waiting for its barrier unit
  stops waiting (:class:`nicoll.remote.Rank`).

A collective whose start was made (every engine armed) is not ended: each engine holds its
schedule and data, the others' polls run it to its end, and their answers are right; they
learn of the death at their next start.  A connection opened after the death (a new run;
a new client in the dead rank's place) is not touched by it.  When the last client of a run
that lost a rank has gone, the server settles the cluster for the next run: it lets a
collective that had started run to its end (so no packet of it reaches the next
collective's engines), clears every engine and programs the barrier tree again from
barrier 0, forgetting the barriers' modes, as a new server would have them.

A server that stops ends every connection: a rank waiting in the rendezvous is answered
that the server is stopping, and any call ends with NicollError (the connection closed).
"""

import hmac
import ipaddress
import os
import socket
import threading
import time

from ..cluster.timing import ARM_ACCESSES, check_armed_in_time, start_cycle
from ..driver.barrier import MODES, SUB_MODES
from ..errors import NicollError
from .protocol import OPERATIONS, recv_frame, send_frame

__all__ = ["ClusterServer", "parse_address"]

#: Barriers whose mode the server remembers, to check the ranks that ask late.
_KEPT_BARRIERS = 64
_SEQ_MASK = 0xFFFF
#: Wall seconds the settling after a lost rank lets a started collective run to its end.
_SETTLE_BUDGET_S = 10.0
#: Cycles the backend runs between two looks at the engines while settling.
_SETTLE_CYCLES = 1024
#: How long a new client waits for the clients of a run that lost a rank to go (_hello).
_HELLO_SETTLE_S = 2.0


def parse_address(address):
    """``("unix", path)`` or ``("tcp", (host, port))`` of ``"unix:PATH"`` or
    ``"tcp:HOST:PORT"``."""
    if not isinstance(address, str):
        raise NicollError(f"an address must be a string 'unix:PATH' or 'tcp:HOST:PORT', "
                          f"not {address!r}")
    kind, _, rest = address.partition(":")
    if kind == "unix" and rest:
        return "unix", rest
    if kind == "tcp":
        host, _, port = rest.rpartition(":")
        if host and port.isdigit() and int(port) < 65536:
            return "tcp", (host.strip("[]"), int(port))
    raise NicollError(f"an address must be 'unix:PATH' or 'tcp:HOST:PORT', not {address!r}")


def _is_loopback(host):
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ClusterServer:
    """Serve ``cluster``'s ranks on ``listen`` (``"unix:PATH"`` or ``"tcp:HOST:PORT"``, port 0
    for any free one); ``token`` is required off the loopback.  :attr:`address` is where it
    listens.  Use :meth:`start` (a background thread) or :meth:`serve_forever`, then
    :meth:`stop`; as a context manager it starts and stops itself."""

    def __init__(self, cluster, listen, *, token=None):
        if token is not None and (not isinstance(token, str) or not token):
            raise NicollError(f"token must be a non-empty string or None, not {token!r}")
        kind, where = parse_address(listen)
        if kind == "tcp" and not _is_loopback(where[0]) and token is None:
            raise NicollError(f"listening on {where[0]!r}, off the loopback, needs a token that "
                              f"clients must present (--token)")
        self._cluster = cluster
        self._token = token
        # The barrier tree (a binary one) in every node, barrier 0 next: what the ranks'
        # barriers (Rank.barrier) count from.
        cluster.configure_barrier()
        self._lock = threading.Lock()           # one request at a time reaches the backend
        self._taken = {}                        # rank -> connection
        self._state = threading.Condition()     # guards _taken and _connections
        self._connections = set()
        self._stopping = threading.Event()
        self._threads = []
        # The rendezvous: the ranks that have asked to start, and a count of starts made.
        self._starting = threading.Condition()
        self._posted = set()
        self._starts = 0
        self._start_cycle = None
        # Clients that died (module docstring, faults), guarded by _starting: a count of
        # hellos and deaths, each rank's last death by that count, and whether a death has
        # happened since the cluster was last settled.
        self._events = 0
        self._gone = {}
        self._unsettled = False
        # The barriers' modes: what each recent barrier was asked for first (seq -> (rank,
        # settings)), and what the root holds (None: not programmed by this server yet).
        self._modes = threading.Lock()
        self._asked = {}
        self._programmed = None
        if kind == "unix":
            if os.path.exists(where):
                raise NicollError(f"{where!r} exists; remove it or choose another path")
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock.bind(where)
            self._unix_path = where
            self.address = f"unix:{where}"
        else:
            family = socket.AF_INET6 if ":" in where[0] else socket.AF_INET
            self._sock = socket.socket(family, socket.SOCK_STREAM)
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind(where)
            self._unix_path = None
            host, port = self._sock.getsockname()[:2]
            self.address = f"tcp:{host}:{port}"
        self._sock.listen()
        self._sock.settimeout(0.2)              # so the accept loop sees a stop

    # -- running ---------------------------------------------------------------------------

    def serve_forever(self):
        """Accept clients until :meth:`stop`."""
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                break                           # the socket was closed by stop()
            conn.settimeout(None)
            thread = threading.Thread(target=self._serve_client, args=(conn,), daemon=True)
            with self._state:
                self._connections.add(conn)
                self._threads.append(thread)
            thread.start()

    def start(self):
        thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._threads.append(thread)
        thread.start()
        return self

    def stop(self, budget_s=10.0):
        """Stop accepting, end every connection and wait (at most ``budget_s``) for them."""
        self._stopping.set()
        with self._starting:
            self._starting.notify_all()
        self._sock.close()
        with self._state:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in list(self._threads):
            if thread is not threading.current_thread():
                thread.join(budget_s)
        if self._unix_path and os.path.exists(self._unix_path):
            os.unlink(self._unix_path)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- one client ------------------------------------------------------------------------

    def _serve_client(self, conn):
        session = None
        try:
            session = self._hello(conn)
            if session is None:
                return
            transport = self._cluster.device(session.rank).transport
            while not self._stopping.is_set():
                try:
                    frame = recv_frame(conn)
                except NicollError as exc:      # the framing is lost: answer and hang up
                    send_frame(conn, {"ok": False, "error": str(exc)})
                    return
                if frame is None:
                    return
                message, payload = frame
                op = message.get("op")
                if op == "bye":
                    session.closed = True
                    return
                if op == "start" and _fields_problem(message, "start") is None:
                    reply, data = self._start(session, message["budget_ms"]), b""
                elif op == "barrier" and _fields_problem(message, "barrier") is None:
                    reply, data = self._barrier(session, message), b""
                else:
                    reply, data = self._serve(transport, message, payload)
                    if op == "idle" and reply["ok"]:
                        with self._starting:
                            gone = self._gone_since(session)
                        if gone:
                            reply["gone"] = gone
                send_frame(conn, reply, data)
        except OSError:
            pass                                # the client went away, or stop()
        finally:
            self._leave(conn, session)

    def _leave(self, conn, session):
        """``conn`` has ended: free its rank; a client that died (no ``bye``) is recorded,
        the ranks waiting to start are woken to hear of it, and the cluster is settled once
        the last client has gone (module docstring, faults)."""
        rank = None if session is None else session.rank
        with self._starting:
            self._posted.discard(rank)
            if rank is not None and not session.closed and not self._stopping.is_set():
                self._events += 1
                self._gone[rank] = self._events
                self._unsettled = True
                self._starting.notify_all()
        with self._state:
            if rank is not None and self._taken.get(rank) is conn:
                del self._taken[rank]
            self._connections.discard(conn)
            # Under _state, so a new client's hello waits until the cluster is settled.
            if not self._taken and self._unsettled and not self._stopping.is_set():
                self._settle()
            self._state.notify_all()
        conn.close()

    def _settle(self):
        """Make the cluster ready for a new run after one that lost a rank (module
        docstring, faults): a started collective runs to its end (at most
        :data:`_SETTLE_BUDGET_S`), then every engine is cleared and the barrier tree
        programmed again from barrier 0."""
        with self._lock:
            devices = [self._cluster.device(r) for r in range(self._cluster.nodes)]
            deadline = time.monotonic() + _SETTLE_BUDGET_S
            while time.monotonic() < deadline and any(
                    status.armed or status.busy
                    for status in (dev.engine.status() for dev in devices)):
                devices[0].idle(_SETTLE_CYCLES)
            for dev in devices:
                dev.engine.clear()
            self._cluster.configure_barrier(self._cluster.barrier_tree)
        with self._starting:
            self._posted.clear()
            self._unsettled = False
        with self._modes:
            self._asked.clear()
            self._programmed = None

    def _gone_since(self, session):
        """The ranks whose clients died after ``session`` began (under ``_starting``)."""
        return sorted(rank for rank, event in self._gone.items() if event > session.opened)

    def _hello(self, conn):
        """The rank a new connection claims, or None (refused, with a reply saying why)."""
        try:
            frame = recv_frame(conn)
        except NicollError as exc:
            send_frame(conn, {"ok": False, "error": str(exc)})
            return None
        if frame is None:
            return None
        message = frame[0]
        problem = _fields_problem(message, "hello")
        nodes = self._cluster.nodes
        if problem is None and self._token is not None and not hmac.compare_digest(
                str(message.get("token", "")), self._token):
            problem = "the token does not match the server's"
        if problem is None and not 0 <= message["rank"] < nodes:
            problem = f"rank {message['rank']} is outside this cluster of {nodes} ranks"
        if problem is None:
            with self._state:
                # A run that lost a rank is settled once its last client has gone (module
                # docstring); clients that said goodbye may not have been seen to go yet.
                # A new client waits a little for that, so that its run does not start on
                # the last run's barrier state (a race a restarted run hit in the suite),
                # then goes on as before: the others may still be running.
                self._state.wait_for(lambda: not (self._unsettled and self._taken),
                                     timeout=_HELLO_SETTLE_S)
                if message["rank"] in self._taken:
                    problem = f"rank {message['rank']} is taken by another client"
                else:
                    self._taken[message["rank"]] = conn
        if problem is not None:
            send_frame(conn, {"ok": False, "error": problem})
            return None
        with self._starting:
            self._events += 1
            session = _Session(message["rank"], self._events)
        send_frame(conn, {"ok": True, "nodes": nodes, "backend": self._cluster.backend})
        return session

    def _start(self, session, budget_ms):
        """The rendezvous (module docstring): the reply to ``session``'s rank's ``start``."""
        nodes = self._cluster.nodes
        rank = session.rank
        with self._starting:
            gone = self._gone_since(session)
            if gone:
                return _gone_reply(gone, "no collective of this run can start")
            self._posted.add(rank)
            starts = self._starts
            if len(self._posted) == nodes:
                try:
                    with self._lock:
                        devices = [self._cluster.device(r) for r in range(nodes)]
                        start = start_cycle(devices[0], ARM_ACCESSES, nodes)
                        for dev in devices:
                            dev.engine.arm(start)
                        check_armed_in_time(devices[0], start, "the engines")
                except NicollError as exc:
                    self._posted.clear()
                    return {"ok": False, "error": str(exc)}
                self._posted.clear()
                self._starts += 1
                self._start_cycle = start
                self._starting.notify_all()
                return {"ok": True, "start": start}
            done = self._starting.wait_for(lambda: self._starts != starts
                                           or self._stopping.is_set()
                                           or self._gone_since(session), budget_ms / 1000)
            if done and self._starts != starts:
                return {"ok": True, "start": self._start_cycle}
            self._posted.discard(rank)
            if self._stopping.is_set():
                return {"ok": False, "error": "the server is stopping"}
            gone = self._gone_since(session)
            if gone:
                return _gone_reply(gone, "this collective cannot start")
            missing = sorted(set(range(nodes)) - self._posted - {rank})
            return {"ok": False, "error": f"ranks {missing} did not post within {budget_ms} ms"}

    def _barrier(self, session, message):
        """The reply to ``session``'s rank's ``barrier`` (module docstring): the root
        programmed for the barrier by the first rank to ask, the same settings checked for
        the others; a normal barrier refused once a client of the run has died."""
        rank = session.rank
        seq = message["seq"]
        settings = tuple(message[name] for name in ("mode", "sub", "m", "c", "estimate"))
        problem = _settings_problem(settings, self._cluster.nodes)
        if problem is not None:
            return {"ok": False, "error": problem}
        if settings[0] == MODES["normal"]:
            with self._starting:
                gone = self._gone_since(session)
            if gone:
                return _gone_reply(gone, f"barrier {seq} cannot be released")
        with self._modes:
            if seq in self._asked:
                first, asked = self._asked[seq]
                if asked != settings:
                    return {"ok": False, "error": (
                        f"rank {rank} asks for barrier {seq} {_describe(settings)}, but rank "
                        f"{first} asked for it {_describe(asked)}; every rank must pass the "
                        f"same mode, thresholds and estimate")}
                return {"ok": True}
            with self._lock:
                tree = self._cluster.barrier_tree
                root = self._cluster.device(tree.root).barrier
                current = root.status().seq
                if current != seq:
                    return {"ok": False, "error": (
                        f"rank {rank} asks for barrier {seq}, but the root (rank {tree.root}) "
                        f"is in barrier {current}: has every rank taken part in every "
                        f"barrier?")}
                if settings != self._programmed:
                    try:
                        _program(root, settings)
                    except NicollError as exc:
                        # The unit refused them: back to normal, so nothing releases early.
                        _program(root, (MODES["normal"], SUB_MODES["count"], 0, 0, 0))
                        self._programmed = None
                        return {"ok": False, "error": str(exc)}
                    self._programmed = settings
            self._asked[seq] = (rank, settings)
            for old in list(self._asked)[:-_KEPT_BARRIERS]:
                del self._asked[old]
        return {"ok": True}

    def _serve(self, transport, message, payload):
        """The reply (and payload) to one request on ``transport``."""
        op = message.get("op")
        problem = _fields_problem(message, op)
        if problem is not None or op == "hello":
            return {"ok": False, "error": problem or "this connection has its rank already"}, b""
        with self._lock:
            try:
                if op == "read32":
                    data, resp = transport.read32(message["address"])
                    return {"ok": True, "data": data, "resp": int(resp)}, b""
                if op == "write32":
                    resp = transport.write32(message["address"], message["data"],
                                             message["strobe"])
                    return {"ok": True, "resp": int(resp)}, b""
                if op in ("mem_write", "mem_load"):
                    resp = getattr(transport, op)(message["address"], payload)
                    return {"ok": True, "resp": int(resp)}, b""
                if op in ("mem_read", "mem_dump"):
                    data, resp = getattr(transport, op)(message["address"], message["length"])
                    return {"ok": True, "resp": int(resp)}, bytes(data)
                transport.idle(message["cycles"])
                return {"ok": True}, b""
            except NicollError as exc:
                return {"ok": False, "error": str(exc)}, b""


class _Session:
    """One client's claim of a rank: the rank, the server's event count when it was made
    (the deaths after it are its run's), and whether the client said ``bye``."""

    def __init__(self, rank, opened):
        self.rank = rank
        self.opened = opened
        self.closed = False


def _gone_reply(gone, consequence):
    """The refusal of a request of a run whose clients ``gone`` have died."""
    who = (f"rank {gone[0]} went away: its client's connection" if len(gone) == 1
           else f"ranks {gone} went away: their clients' connections")
    return {"ok": False, "gone": gone,
            "error": (f"{who} ended without closing (the process died?) during this run; "
                      f"{consequence}; a new run (clients that connect anew) can use the "
                      f"server")}


def _fields_problem(message, op):
    """Why ``message`` is not a well-formed request of ``op``, or None."""
    if op not in OPERATIONS:
        return f"unknown operation {op!r}; the server knows {', '.join(OPERATIONS)}"
    for name in OPERATIONS[op]:
        value = message.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return f"{op} needs {name!r} as a non-negative integer, not {value!r}"
    return None


def _settings_problem(settings, nodes):
    """Why a ``barrier`` request's settings are not ones the root's unit runs, or None
    (the unit's own checks, made before anything is written: ERRORS m_range, c_zero,
    mode)."""
    mode, sub, m, c, estimate = settings
    if mode == MODES["normal"]:
        if (sub, m, c, estimate) != (SUB_MODES["count"], 0, 0, 0):
            return (f"a normal barrier takes sub-mode {SUB_MODES['count']} and no m, c or "
                    f"estimate, not sub {sub!r}, m {m!r}, c {c!r}, estimate {estimate!r}")
        return None
    if mode != MODES["ac"]:
        return (f"per-rank barriers run in mode {MODES['normal']} (normal) or {MODES['ac']} "
                f"(AC), not {mode!r}")
    if sub not in SUB_MODES.values():
        return f"the AC sub-mode must be one of {sorted(SUB_MODES.values())}, not {sub!r}"
    if sub & SUB_MODES["count"] and not 1 <= m <= nodes:
        return f"m must be between 1 and the {nodes} ranks of the barrier tree, not {m!r}"
    if not sub & SUB_MODES["count"] and m:
        return f"sub-mode {sub!r} has no count threshold, but m is {m!r}"
    if sub & SUB_MODES["time"] and not 1 <= c < 1 << 64:
        return f"c must be between 1 and 2**64 - 1 cycles, not {c!r}"
    if not sub & SUB_MODES["time"] and c:
        return f"sub-mode {sub!r} has no time threshold, but c is {c!r}"
    if estimate >= 1 << 64:
        return f"estimate must be below 2**64, not {estimate!r}"
    return None


def _program(unit, settings):
    """Write ``settings`` into the root's decision registers and check the unit took them."""
    mode, sub, m, c, estimate = settings
    names = {value: name for name, value in MODES.items()}
    subs = {value: name for name, value in SUB_MODES.items()}
    unit.set_ac_parameter(m, c)
    unit.set_estimate(estimate)
    unit.set_mode(names[mode], subs[sub])
    unit.check()


def _describe(settings):
    mode, sub, m, c, estimate = settings
    if mode == MODES["normal"]:
        return "in normal mode"
    return (f"in AC mode with m={m if sub & SUB_MODES['count'] else None}, "
            f"c={c if sub & SUB_MODES['time'] else None}, "
            f"estimate={estimate}")
