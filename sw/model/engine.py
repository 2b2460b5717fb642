# Ref: seed 002 (ICT/CAS): the engine runs schedules; algorithms are data.
# Ref: seed 000 (CN101206588): reductions in the order the schedule gives.
# Ref: seed 001: barrier steps between batches of an in-place all-to-all (S23).
"""Transaction-level model of the collective engines of a model cluster.

One :class:`EngineNetworkModel` is shared by the :class:`~nicoll.model.node.ModelNode` s of a
cluster (like :class:`~nicoll.model.barrier.BarrierNetworkModel`); :meth:`attach` gives each
node the engine block of the register map, with the semantics of the register descriptions
(``hw/regmap/nicoll.rdl``) and of :mod:`nicoll.hw.engine`:

- CONTROL.push checks the command in CMD0 .. CMD10 and appends it to the queue, or refuses it
  with ERRORS bits and does not queue it: ``running`` (the engine runs) or else
  ``queue_full``, without looking at the command; otherwise every one that applies of
  ``region`` (no bytes, ``offset + length`` past device memory, or a strided region whose
  run is longer than its stride), ``peer`` (a node ≥ MAX_NODES) and ``command`` (the
  reserved action 3, a barrier that also sends or receives, ...): :func:`push_refusals`, the
  gateware's rules.  A half the command does not have is not checked.  A strided region
  whose runs pass the end of memory is queued and stops its command with ``region`` when
  the half runs (its send when the receiver is there, its receive when the message comes),
  as the gateware stops at its first row outside memory.
- CONTROL.go starts the queue now; CONTROL.arm starts it at the first cycle CYCLES ≥ START_AT
  (read while armed); CONTROL.clear empties the queue, stops a running one and clears
  STATUS, ERRORS and the counters.  One write acts in the order clear, push, go, arm.  A
  start clears the counters and STEP.  The engine stops at the first error, so a start
  while an ERRORS bit is set stops at once (a schedule with a refused command never runs).
  STARTED_AT is stamped at each start, FINISHED_AT when the queue runs to its end; neither
  is cleared.
- Commands run in order, each one's send and receive halves independently.  A message moves
  when its sender is at the send (to d, tag t) and its receiver d at the matching receive
  (from the sender, tag t): the rendezvous of the clear-to-send.  A receive that finds the
  sender at a send to it with another tag sets ``protocol`` at the sender.  A command is
  finished when both halves are; a barrier command signals done to the node's barrier unit
  for its current barrier number and is finished when the unit has left that barrier.
- The receiver checks the message's length (``length``), then stores the bytes (COPY) or
  reduces them with the bytes in its region in the element type and op of its REDUCTION
  register, local operand first or received operand first (:func:`nicoll.ops.combine`, the
  ALU's arithmetic, bit-exact with numpy and ml_dtypes).  An op and type the build's ALU
  lacks (its OPS_* register bit clear), or codes naming no op or type, set ``alu`` there; so
  does a reducing region that is not element-aligned (the ALU combines whole elements).
  A receiver with an error stops and writes nothing; its sender's half is finished.
- An aggregate command (seed 003) registers with the repack units' control tree of node
  ``send_to`` and finishes when their exchange has run: the repack blocks are a
  :class:`~nicoll.model.repack.RepackHubModel`, which this model holds and calls.

Time: transfers have **zero latency**.  Everything that can happen once a node starts happens
in its start cycle.  An engine waiting at a barrier moves when the barrier is released: at
once when another engine's barrier command completes it, at the next bus access of any node
when a host write or a timed done does.  Progress is made in one loop over every running engine
until nothing moves, in node order, so no result depends on the order in which the host polls.

Counters: BYTES_SENT / BYTES_RECEIVED count payload bytes; PACKETS_SENT / PACKETS_RECEIVED
count data packets (``ceil(ceil(length / W) / packet_beats)`` per message, W the beat's bytes,
``packet_beats`` 0 meaning PACKET.beats) and clear-to-send packets (one sent by each receive,
counted when the receiver reaches it, and received by the sender when its message moves);
ALU_BEATS counts the memory rows of reducing receives (one per row a run touches).  A message
a node sends to itself counts like any other.  BUSY_CYCLES and STALL_CYCLES read 0: the model
has no cycle-level timing.  ``unexpected`` is set only under faults: matched rendezvous
deliver nothing that no receive expects.

Faults (a cluster opened with ``faults=``; :mod:`nicoll.model.faults`): a message moves by
the engines' delivery protocol (:class:`~nicoll.model.faults.Delivery`), its clear-to-send,
data packets, RESENDs, ACKs and probes crossing the links of a
:class:`~nicoll.model.faults.ModelLinks`: a lost packet is sent again, and the message
arrives whole, unless ``PROBE_TRIES`` probes in a row go unanswered; then the sender stops
with ``lost`` and the receiver writes nothing.  PACKETS_SENT and BYTES_SENT count every pass;
PACKETS_RECEIVED every copy that arrives; the protocol's own packets are not counted.
"""

from dataclasses import dataclass, field

import numpy as np

from nicoll.hw.engine import COMMAND_WORDS, DEFAULT_PACKET_BEATS, DEFAULT_QUEUE_DEPTH, StepAction
from nicoll.hw.core import DEFAULT_REPACK_UNITS
from nicoll.hw.net.packet import PacketKind
from nicoll.hw.ops import DType, ReduceOp

from ..driver.engine import COUNTER_NAMES, ERROR_NAMES, _U32, unpack
from .. import region_bytes
from .faults import Delivery
from ..errors import NicollError
from ..ops import combine, numpy_dtype
from .repack import RepackHubModel

__all__ = ["EngineNetworkModel", "MODEL_ALU_LATENCY", "push_refusals"]

#: CAPS.alu_latency of the model: its reductions take no time.
MODEL_ALU_LATENCY = 0
_U64 = (1 << 64) - 1
_ACTIONS = {a.value for a in StepAction}


@dataclass
class _Engine:
    """One node's engine: its queue, where it is, its errors and counters."""
    queue: list = field(default_factory=list)     # unpacked commands
    armed: bool = False
    busy: bool = False
    done: bool = False
    errors: set = field(default_factory=set)
    step: int = 0               # commands finished since the start
    entered: bool = False       # the running command has begun (clear-to-send, barrier done)
    sent: bool = False
    received: bool = False
    barrier_seq: int = 0        # the barrier a barrier command signalled done for
    stuck: bool = False         # waits for a packet the network lost (:mod:`.faults`)
    counts: dict = field(default_factory=lambda: dict.fromkeys(COUNTER_NAMES, 0))
    started_at: int = 0
    finished_at: int = 0

    def clear(self):
        keep = (self.started_at, self.finished_at)
        self.__init__()
        self.started_at, self.finished_at = keep

    @property
    def command(self):
        return self.queue[self.step]


class EngineNetworkModel:
    """The engines of a model cluster and the zero-latency network between them.

    :param clock: the cluster's :class:`~nicoll.model.barrier.ModelClock`.
    :param max_nodes: MAX_NODES of the build (commands naming a node at or above it are
        refused).
    :param depth: commands a queue holds (CAPS.depth).
    :param packet_beats: the largest data packet in beats (PACKET.beats).
    :param repack_units: repack units of a node that has them (CAPS.units).
    :param repack_nodes: the node ids that have them; None for every node (a core on its
        own).  A cluster builds them on node 0 only (:class:`nicoll.hw.sim.cluster.ClusterTop`).
    :param links: a :class:`~nicoll.model.faults.ModelLinks` whose faults the packets meet,
        or None for a network that loses nothing.
    """

    def __init__(self, clock, max_nodes, *, depth=DEFAULT_QUEUE_DEPTH,
                 packet_beats=DEFAULT_PACKET_BEATS, repack_units=DEFAULT_REPACK_UNITS,
                 repack_nodes=None, links=None):
        self.clock = clock
        self._links = links
        self.max_nodes = max_nodes
        self.depth = depth
        self.packet_beats = packet_beats
        self._nodes = {}        # node id -> ModelNode
        self._engines = {}      # node id -> _Engine
        self._memory = {}       # node id -> numpy view of the node's memory
        self._running = set()
        self._armed = set()
        self._repack = RepackHubModel(nodes=self._nodes, engines=self._engines, memory=self._memory,
                                      fail=self._fail, max_nodes=max_nodes,
                                      repack_units=repack_units, repack_nodes=repack_nodes,
                                      links=links)
        clock.listen(self._tick)

    # -- attaching nodes ------------------------------------------------------------------

    def attach(self, node, node_id):
        """Give ``node`` (a :class:`~nicoll.model.node.ModelNode`) its engine block."""
        if node_id in self._nodes:
            raise NicollError(f"node id {node_id} is attached to the engine model twice")
        self._nodes[node_id] = node
        self._engines[node_id] = e = _Engine()
        self._memory[node_id] = np.frombuffer(node.memory, dtype=np.uint8)
        node.on_write("engine", "CONTROL", lambda: self._control(node_id))
        values = {
            ("CAPS", "depth"): lambda: self.depth,
            ("CAPS", "alu_latency"): lambda: MODEL_ALU_LATENCY,
            ("PACKET", "beats"): lambda: self.packet_beats,
            ("STATUS", "queued"): lambda: len(e.queue),
            ("STATUS", "armed"): lambda: int(e.armed),
            ("STATUS", "busy"): lambda: int(e.busy),
            ("STATUS", "done"): lambda: int(e.done),
            ("STATUS", "error"): lambda: int(bool(e.errors)),
            ("STEP", "count"): lambda: e.step,
            ("STARTED_AT", "cycle"): lambda: e.started_at & _U64,
            ("FINISHED_AT", "cycle"): lambda: e.finished_at & _U64,
        }
        for name in ERROR_NAMES:
            values["ERRORS", name] = lambda name=name: int(name in e.errors)
        for name in COUNTER_NAMES:
            values[name, "count"] = lambda name=name: e.counts[name] & _U32
        for (register, field_name), source in values.items():
            node.drive("engine", register, field_name, source)
        self._repack.attach(node, node_id)

    # -- register writes ------------------------------------------------------------------

    def _control(self, node_id):
        node, e = self._nodes[node_id], self._engines[node_id]
        now = self.clock.now
        control = lambda name: node.field("engine", "CONTROL", name)     # noqa: E731
        if control("clear"):
            # A clear wins over the other bits of its write, as in the gateware (the queue
            # drops a push in the clear's cycle, armed and a start yield to it).
            e.clear()
            self._running.discard(node_id)
            self._armed.discard(node_id)
            self._progress(now)
            return
        if control("push"):
            self._push(node_id)
        if control("go"):
            self._start([node_id], now)
        if control("arm") and not e.busy:
            e.armed = True
            self._armed.add(node_id)
            if node.field("engine", "START_AT", "cycle") <= now:
                self._start([node_id], now)
        self._progress(now)

    def _push(self, node_id):
        node, e = self._nodes[node_id], self._engines[node_id]
        if e.busy:
            e.errors.add("running")
            return
        if len(e.queue) >= self.depth:
            e.errors.add("queue_full")
            return
        command = unpack(node.field("engine", f"CMD{k}", "bits") for k in range(COMMAND_WORDS))
        problems = self._refusals(node_id, command)
        if problems:
            e.errors |= problems
        else:
            e.queue.append(command)

    def _refusals(self, node_id, c):
        """The ERRORS bits a pushed command sets (empty: it is queued)."""
        return push_refusals(c, beat_bytes=self._nodes[node_id].data_width // 8,
                             mem_size=len(self._memory[node_id]), max_nodes=self.max_nodes,
                             packet_beats=self.packet_beats)

    # -- running --------------------------------------------------------------------------

    def _start(self, node_ids, now):
        for node_id in node_ids:
            e = self._engines[node_id]
            e.armed = False
            self._armed.discard(node_id)
            if e.busy or e.errors:
                continue        # an error stops the engine until CONTROL.clear
            e.busy, e.done, e.step = True, False, 0
            e.entered = e.sent = e.received = e.stuck = False
            e.counts = dict.fromkeys(COUNTER_NAMES, 0)
            e.started_at = now
            if not e.queue:
                self._finish(node_id, now)
            else:
                self._running.add(node_id)

    def _finish(self, node_id, now):
        e = self._engines[node_id]
        e.busy, e.done, e.finished_at = False, True, now
        self._running.discard(node_id)

    def _fail(self, node_id, name):
        e = self._engines[node_id]
        e.errors.add(name)
        e.busy = False
        self._running.discard(node_id)

    def _tick(self, target):
        """Before the clock moves to ``target``: start the engines armed for cycles up to it,
        and let engines waiting at a barrier see a release."""
        if self._armed:
            due = {}
            for node_id in self._armed:
                at = self._nodes[node_id].field("engine", "START_AT", "cycle")
                if at <= target:
                    due.setdefault(max(at, self.clock.now), []).append(node_id)
            for at in sorted(due):
                # Every engine of one start cycle starts before any of them moves.
                self._start(sorted(due[at]), at)
                self._progress(at)
        if any(self._engines[n].command["barrier"] for n in self._running):
            self._progress(self.clock.now)

    def _progress(self, now):
        """Move every running engine as far as it goes, until none moves."""
        moved = True
        while moved:
            moved = False
            for node_id in sorted(self._running):
                moved |= self._advance(node_id, now)

    def _advance(self, node_id, now):
        e = self._engines[node_id]
        moved = False
        while e.busy:
            c = e.command
            if not e.entered:
                self._enter(node_id, c)
                moved = True
            if c["aggregate"]:
                if not e.sent:
                    moved |= self._repack.try_exchange(c["send_to"])
                if not e.busy or not e.sent:
                    break
            elif c["barrier"]:
                seq = self._nodes[node_id].peek("barrier", "STATUS", "seq")
                if seq == e.barrier_seq:
                    break
            else:
                if c["has_send"] and not e.sent:
                    moved |= self._try_send(node_id, c)
                if not e.busy or (c["has_send"] and not e.sent) or (c["has_recv"] and not e.received):
                    break
            e.step += 1
            e.entered = e.sent = e.received = False
            moved = True
            if e.step == len(e.queue):
                self._finish(node_id, now)
        return moved

    def _enter(self, node_id, c):
        e = self._engines[node_id]
        e.entered = True
        if c["aggregate"]:
            self._repack.register(node_id, c)
            return
        if c["barrier"]:
            # The node's barrier unit: done for the barrier it is in, then wait for its release.
            node = self._nodes[node_id]
            e.barrier_seq = node.peek("barrier", "STATUS", "seq")
            node.strobe("barrier", "CONTROL", done=1, seq=e.barrier_seq)
        if c["has_recv"]:
            e.counts["PACKETS_SENT"] += 1       # the clear-to-send

    def _try_send(self, node_id, c):
        """Move the running command's message if its receiver is at the matching receive."""
        peer_id = c["send_to"]
        peer = self._engines.get(peer_id)
        if peer is None or not peer.busy or not peer.entered or peer.received:
            return False
        r = peer.command
        if not r["has_recv"] or r["recv_from"] != node_id:
            return False
        e = self._engines[node_id]
        if self._links is not None and (e.stuck or peer.stuck):
            return False
        if r["recv_tag"] != c["send_tag"]:
            self._fail(node_id, "protocol")
            return True
        if self._past_memory(node_id, c["send"]):
            self._fail(node_id, "region")
            return True
        data = self._read(node_id, c["send"])
        width = self._nodes[node_id].data_width // 8
        packet_bytes = width * (c["packet_beats"] or self.packet_beats)
        packets = -(-(-(-len(data) // width)) // (c["packet_beats"] or self.packet_beats))
        e.counts["PACKETS_RECEIVED"] += 1       # its clear-to-send
        if self._links is None:
            e.counts["BYTES_SENT"] += len(data)
            e.counts["PACKETS_SENT"] += packets
            peer.counts["BYTES_RECEIVED"] += len(data)
            peer.counts["PACKETS_RECEIVED"] += packets
            self._deliver(peer_id, r, data)
            e.sent = self._acknowledged(peer)
            return True
        outcome = Delivery(self._links, node_id, peer_id, packets,
                           seek=not region_bytes.strided(**c["send"])).run()
        e.counts["PACKETS_SENT"] += outcome.sent
        e.counts["BYTES_SENT"] += sum(min(packet_bytes, len(data) - k * packet_bytes)
                                      for k in outcome.sent_indices)
        peer.counts["PACKETS_RECEIVED"] += outcome.arrived
        if outcome.taken == packets:
            peer.counts["BYTES_RECEIVED"] += len(data)
            self._deliver(peer_id, r, data)
        else:
            peer.counts["BYTES_RECEIVED"] += min(len(data), outcome.taken * packet_bytes)
        if outcome.lost:
            self._fail(node_id, "lost")         # its probes went unanswered
        else:
            e.sent = self._acknowledged(peer)
        return True

    @staticmethod
    def _acknowledged(peer):
        """Whether the receiver's ACK came: not when it refused the message's length (the
        gateware's receiver takes no packet of a message that does not fit its region, and
        its sender waits for the ACK until the host's budget ends the call)."""
        return "length" not in peer.errors

    def _deliver(self, node_id, r, data):
        e, region = self._engines[node_id], r["recv"]
        if len(data) != region["length"]:
            self._fail(node_id, "length")
            return
        if self._past_memory(node_id, region):
            self._fail(node_id, "region")
            return
        if r["action"] != StepAction.COPY.value:
            reduced = self._reduce(node_id, r, data)
            if reduced is None:
                self._fail(node_id, "alu")
                return
            data = reduced
            e.counts["ALU_BEATS"] += region_bytes.rows(**region, width=self._nodes[node_id].data_width // 8)
        self._write(node_id, region, data)
        e.received = True

    def _past_memory(self, node_id, region):
        """Whether a queued region's runs pass the end of memory (a strided one can: the
        push checks only ``offset + length``); the gateware stops there with ``region``."""
        return region_bytes.end(**region) > len(self._memory[node_id])

    def _reduce(self, node_id, r, data):
        """The bytes ``local ∘ received`` (or ``received ∘ local``), or None if the ALU refuses."""
        node, region = self._nodes[node_id], r["recv"]
        op_code = node.field("engine", "REDUCTION", "op")
        dtype_code = node.field("engine", "REDUCTION", "dtype")
        if op_code >= len(ReduceOp) or dtype_code >= len(DType):
            return None
        op, dtype = ReduceOp(op_code), DType(dtype_code)
        if not node.peek("alu", f"OPS_{dtype.name}", "ops") >> op.value & 1:
            return None
        npdtype = numpy_dtype(dtype)
        size = npdtype.itemsize
        values = [region["offset"], region["length"]]
        if region_bytes.strided(**region):
            values += [region["run"], region["stride"]]
        if any(v % size for v in values):
            return None
        local = self._read(node_id, region).view(npdtype)
        received = data.view(npdtype)
        if r["action"] == StepAction.REDUCE_LOCAL_FIRST.value:
            result = combine(op, local, received)
        else:
            result = combine(op, received, local)
        return np.ascontiguousarray(result).view(np.uint8)

    # -- memory ---------------------------------------------------------------------------

    def _read(self, node_id, region):
        return self._memory[node_id][region_bytes.byte_addresses(**region)].copy()

    def _write(self, node_id, region, data):
        self._memory[node_id][region_bytes.byte_addresses(**region)] = data


def push_refusals(c, *, beat_bytes, mem_size, max_nodes, packet_beats):
    """The ERRORS bits CONTROL.push sets for command ``c`` (a COMMAND_LAYOUT field dict) on
    an idle engine with room in its queue; empty: it is queued.

    The rules are :class:`nicoll.hw.engine.Engine`'s push checks, and
    ``tests/test_hw_engine_refusals.py::test_push_checks_agree_with_the_device_model`` holds the two
    together on random command words.  A region is checked by its own fields: not empty,
    ``offset + length`` within memory, and a strided region's run no longer than its stride.
    Where the runs of a strided region end is a product of fields, which the gateware does
    not make at a push: a strided region whose runs pass the end of memory is queued and
    stops its command with ``region`` when it runs (:meth:`EngineNetworkModel._past_memory`).
    """
    problems = set()
    if c["aggregate"] and (c["barrier"] or not (c["has_send"] and c["has_recv"])
                           or c["send_tag"] > max_nodes
                           or c["action"] != StepAction.COPY.value
                           or c["send"]["stride"] <= beat_bytes or c["send"]["stride"] % beat_bytes
                           or c["recv"]["stride"] == 0 or c["send"]["run"]
                           or c["recv"]["run"]):
        problems.add("command")
    if (c["action"] not in _ACTIONS or (c["barrier"] and (c["has_send"] or c["has_recv"]))
            or not (c["barrier"] or c["has_send"] or c["has_recv"])
            or (c["action"] != StepAction.COPY.value and not c["has_recv"])
            or c["packet_beats"] > packet_beats):
        problems.add("command")
    for has, peer, region in (("has_send", "send_to", "send"), ("has_recv", "recv_from", "recv")):
        if not c[has]:
            continue
        if c[peer] >= max_nodes:
            problems.add("peer")
        r = c[region]
        if (r["length"] == 0 or r["offset"] + r["length"] > mem_size
                or (region_bytes.strided(**r) and r["run"] > r["stride"])):
            problems.add("region")
    return problems

