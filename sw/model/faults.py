# Ref: G. Marsaglia, "Xorshift RNGs", Journal of Statistical Software 8(14), 2003 (xorshift128,
#      shifts 11, 19, 8).
"""The fault injectors of the simulated network, for the device model's messages (issue 22).

The simulators put a :class:`~nicoll.hw.sim.faulty_link.FaultyLink` on each direction of every
switch port; the model has no packets, so :class:`ModelLinks` stands in for those links at
the level of its messages.  Every packet the gateware would send (a clear-to-send, each data
packet of a message, a barrier notice, a repack registration, message or result) crosses the
sender's link into the switch and then the receiver's link out of it, and on each link meets
what the gateware's injector would do to it:

- the same generator: :class:`LinkGenerator` is the injector's xorshift128, seeded from the
  same words for the link's index, five outputs per packet (drop, flip, duplicate, delay, the
  flip's place), compared with the same thresholds; the targeted mode counts packets of its
  kind on its link from the epoch's change, as the injector does.  ``tests/test_faults.py``
  runs :class:`~nicoll.hw.sim.faults.FaultInjector` and this generator on one packet
  sequence and checks they pick the same packets.
- the same outcome: a dropped packet is gone; a flipped one leaves the link and its CRC check
  drops it (``fcs_bad`` on that link); a duplicate leaves twice and the receiver takes one
  copy; a delay costs time only, which the model has none of, so it is counted and does
  nothing else.
- the same counters, packed with :func:`~nicoll.hw.sim.faulty_link.link_counters_layout`.

What the lost packet does to the call is decided by the model that sends it
(:mod:`nicoll.model.engine`, :mod:`nicoll.model.barrier`, :mod:`nicoll.model.repack`), as the
gateware would: a step's message is delivered by the engines' protocol (:class:`Delivery`:
a gap answered with a RESEND, a pass again from it, an ACK, probes after a silence), so a
lost clear-to-send, data packet or protocol packet costs packets, not the call, unless
``PROBE_TRIES`` probes in a row go unanswered (``lost``); any other lost packet (a barrier
notice, a repack packet) leaves its receiver waiting, and the host's wait ends the call as
stalled.

The model sends its packets in another order than the simulators (it moves whole messages
at once), so the same seed picks other packets than on a simulator: the figures agree in
distribution, not packet for packet.
"""

from nicoll.hw.engine.transmit import PROBE_TRIES
from nicoll.hw.net.packet import PacketKind
from nicoll.hw.sim.faults import FaultAction, _mix32, fault_config_layout
from nicoll.hw.sim.faulty_link import link_counters_layout

__all__ = ["LinkGenerator", "ModelLinks", "Delivery"]

#: Passes of one message after which the model gives up (as ``lost``): at any loss rate
#: below 1 a message ends long before; the bound keeps a model run finite.
MAX_PASSES = 10_000

_MASK32 = 0xFFFF_FFFF


def _rotl(value, amount):
    return ((value << amount) | (value >> (32 - amount))) & _MASK32


class LinkGenerator:
    """The draws of one link's fault injector: five 32-bit outputs per packet."""

    def __init__(self, seed, link):
        k = [_mix32(4 * link + n + 1) for n in range(4)]
        self.state = [seed ^ k[0], _rotl(seed, 11) ^ k[1], _rotl(seed, 22) ^ k[2], k[3] | 1]

    def packet(self):
        """The next packet's draws: (drop, flip, duplicate, delay, where)."""
        words = list(self.state)
        draws = []
        for _ in range(5):
            x, w = words[0], words[3]
            t = (x ^ (x << 11)) & _MASK32
            out = w ^ (w >> 19) ^ t ^ (t >> 8)
            draws.append(out)
            words = words[1:] + [out]
        self.state = draws[1:]
        return draws


class ModelLinks:
    """Every link of a model cluster, two per switch port (``2 * node`` into the switch,
    ``2 * node + 1`` out of it), under the configuration the host writes.

    :param links: how many links the simulators' cluster of the same configuration has.
    """

    def __init__(self, links):
        self._config_layout = fault_config_layout()
        self._counter_layout = link_counters_layout()
        self._links = links
        self._config = None
        self._epoch = None
        self._reload(0)

    def _reload(self, seed):
        self._generators = [LinkGenerator(seed, k) for k in range(self._links)]
        self._kind_counts = [0] * self._links
        self._counters = [dict.fromkeys(self._counter_layout.members, 0)
                          for _ in range(self._links)]

    def configure(self, raw):
        """Take the bytes of the injectors' configuration port
        (:func:`nicoll.faults.pack_config`); a new epoch restarts every generator from the
        seed and clears the counters, as it does in the gateware."""
        word = int.from_bytes(raw, "little")
        config = {name: word >> member.offset & ((1 << member.width) - 1)
                  for name, member in self._config_layout}
        if config["epoch"] != self._epoch:
            self._reload(config["seed"])
            self._epoch = config["epoch"]
        self._config = config

    def counters(self):
        """The bytes of the counters port: every link's counters in link order."""
        size = self._counter_layout.size
        word = 0
        for k, counts in enumerate(self._counters):
            for name, member in self._counter_layout:
                word |= (counts[name] & _MASK32) << (k * size + member.offset)
        return word.to_bytes(-(-self._links * size // 8), "little")

    def _cross(self, link, kind, copies):
        """``copies`` of one packet of ``kind`` onto ``link``; the copies that leave it
        intact."""
        config, counts = self._config, self._counters[link]
        arrived = 0
        for _ in range(copies):
            draw_drop, draw_flip, draw_duplicate, draw_delay, _ = \
                self._generators[link].packet()
            action = FaultAction.NONE
            if config is not None and kind.value == config["target_kind"]:
                # Each injector counts the packets of the target's kind it takes; only the
                # target's link acts on the count.
                if (config["target_link"] == link
                        and self._kind_counts[link] == config["target_index"]):
                    action = FaultAction(config["target_action"])
                self._kind_counts[link] += 1
            counts["packets"] += 1
            if config is None:
                arrived += 1
                continue
            drop = draw_drop < config["drop"] or action == FaultAction.DROP
            if drop:
                counts["dropped"] += 1
                continue
            flip = draw_flip < config["flip"] or action == FaultAction.FLIP
            duplicate = draw_duplicate < config["duplicate"] or action == FaultAction.DUPLICATE
            if draw_delay < config["delay"]:
                counts["delayed"] += 1
            leaving = 2 if duplicate else 1
            if duplicate:
                counts["duplicated"] += 1
            if flip:
                # The duplicate replays the flipped beats: every copy fails the check.
                counts["flipped"] += 1
                counts["fcs_bad"] += leaving
                continue
            arrived += leaving
        return arrived

    def arrivals(self, src, dst, kind):
        """One packet of ``kind`` (a :class:`~nicoll.hw.net.packet.PacketKind`) from node
        ``src`` through the switch to node ``dst``: how many copies reach ``dst``."""
        through = self._cross(2 * src, kind, 1)
        return self._cross(2 * dst + 1, kind, through) if through else 0

    def deliver(self, src, dst, kind):
        """One packet of ``kind`` from ``src`` to ``dst``: True if a copy reaches ``dst``."""
        return self.arrivals(src, dst, kind) > 0

    def first_lost(self, src, dst, kind, count):
        """``count`` packets of ``kind`` from ``src`` to ``dst``, in order: the index of the
        first that does not arrive, or None if all do.  Every packet is sent (a sender does
        not know what its link lost)."""
        lost = None
        for k in range(count):
            if not self.deliver(src, dst, kind) and lost is None:
                lost = k
        return lost


class Delivery:
    """One step's message of ``packets`` data packets from ``src`` to ``dst`` under the
    engines' delivery protocol (docs/faults.md, "Packet-level recovery"), every packet of it
    crossing ``links``: the receiver's clear-to-send; passes of data packets, the first from
    offset 0, each later one from the receiver's offset (``seek``: a region of one run) or
    from 0; the receiver's RESEND at the first gap of a pass; its ACK once every packet is
    taken; the sender's PROBE, answered by the receiver, after a wait without news.

    :meth:`run` returns self, with ``sent`` (data packets sent), ``sent_indices`` (which),
    ``arrived`` (data packet copies that reached the receiver), ``taken`` (packets the
    receiver took, in order) and ``lost`` (``PROBE_TRIES`` probes in a row went unanswered:
    the sender stops with ERRORS.lost).
    """

    def __init__(self, links, src, dst, packets, *, seek):
        self._links, self._src, self._dst = links, src, dst
        self._packets, self._seek = packets, seek
        self.sent, self.sent_indices, self.arrived, self.taken, self.lost = 0, [], 0, 0, False

    def _to_sender(self):
        return self._links.deliver(self._dst, self._src, PacketKind.CLEAR)

    def _probe(self):
        """Probes until one is answered: False after PROBE_TRIES unanswered in a row."""
        for _ in range(PROBE_TRIES):
            if self._links.deliver(self._src, self._dst, PacketKind.CLEAR) and self._to_sender():
                return True
        self.lost = True
        return False

    def _pass(self, first):
        """Data packets ``first`` .. the last; whether the receiver's RESEND came back."""
        told = resend = False
        for k in range(first, self._packets):
            self.sent += 1
            self.sent_indices.append(k)
            copies = self._links.arrivals(self._src, self._dst, PacketKind.DATA)
            self.arrived += copies
            if not copies:
                continue
            if k == self.taken:
                self.taken += 1             # its copy, if any, is behind: dropped
            elif k > self.taken and not told:
                told = True                 # a gap: one RESEND per pass
                resend = self._to_sender()
        return resend

    def run(self):
        if not self._to_sender() and not self._probe():     # the clear-to-send
            return self
        start = 0
        for _ in range(MAX_PASSES):
            resend = self._pass(start if self._seek else 0)
            if self.taken == self._packets:
                # The ACK left with the last packet; lost, the sender's probe gets another.
                if not self._to_sender():
                    self._probe()
                return self
            if not resend and not self._probe():
                return self
            start = self.taken
        self.lost = True
        return self
