# Ref: G. Marsaglia, "Xorshift RNGs", Journal of Statistical Software 8(14), 2003 (xorshift128,
#      shifts 11, 19, 8).
"""A fault injector on a link of the simulated fabric, for the simulated cluster only.

:class:`FaultInjector` sits on one :func:`~nicoll.hw.sim.fcs.link_stream` (between the
sender's :class:`~nicoll.hw.sim.fcs.FcsAppend` and the receiver's
:class:`~nicoll.hw.sim.fcs.FcsCheck`) and gives each packet, at the rates of its ``config``
(:func:`fault_config_layout`), the faults of a real wire:

- **drop**: the packet is taken and nothing of it leaves;
- **flip**: one bit of ``data`` in a kept byte of one beat is inverted (``fcs`` is not
  touched, so the receiver's check drops the packet);
- **duplicate**: the packet leaves twice, back to back (replayed from a memory of
  ``max_packet_beats`` entries; a longer packet leaves once);
- **delay**: the packet's first beat waits ``delay_cycles`` cycles before it may leave, and
  every later packet waits behind it.

Drop excludes the others; flip, duplicate and delay combine.  A **targeted** fault comes on
top of the rates: the ``target_index``-th packet (from 0) of kind ``target_kind`` on link
``target_link`` gets ``target_action``.

Draws come from a xorshift128 generator seeded from ``seed`` and the link's index, advanced
five outputs per packet (one per rate and one for the flip's position) when its first beat is
taken: the same seed on the same packet sequence injects the same faults, whatever the
timing.  A change of ``epoch`` (and the first cycle after reset) reloads the generator and
clears the counters and the targeted mode's packet count.

With every rate 0 and no target the injector is a wire (``o`` is ``i`` in the same cycle),
so a fault-free run keeps the cycle counts of a build without faults configured.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, enum, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..net.packet import PacketKind
from .fcs import link_beat_layout, link_stream


__all__ = ["FaultAction", "fault_config_layout", "fault_counters_layout", "FaultInjector"]


_MASK32 = 0xFFFFFFFF


class FaultAction(enum.Enum, shape=2):
    """What the targeted mode does to its packet."""
    NONE = 0
    DROP = 1
    FLIP = 2
    DUPLICATE = 3


def fault_config_layout():
    """An injector's configuration.

    - ``drop``, ``flip``, ``duplicate``, ``delay``: each fault's probability per packet times
      2**32 (a packet whose draw is below it gets the fault);
    - ``delay_cycles``: the extra cycles a delayed packet's first beat waits;
    - ``seed``: the generator's seed (each link mixes in its own index);
    - ``epoch``: a change reloads the generator from ``seed`` and clears every counter;
    - ``target_link``, ``target_kind``, ``target_index``, ``target_action``: the targeted
      mode (``target_action`` NONE: off).
    """
    return data.StructLayout({
        "drop": 32, "flip": 32, "duplicate": 32, "delay": 32,
        "delay_cycles": 16, "seed": 32, "epoch": 8,
        "target_link": 8, "target_kind": PacketKind.as_shape().width, "target_index": 32,
        "target_action": FaultAction,
    })


def fault_counters_layout():
    """An injector's counts since the last epoch change: packets taken, and packets that got
    each fault (wrapping)."""
    return data.StructLayout({"packets": 32, "dropped": 32, "flipped": 32, "duplicated": 32,
                              "delayed": 32})


def _mix32(x):
    """A 32-bit integer hash (the finaliser of MurmurHash3), for the per-link seed words."""
    x = ((x ^ (x >> 16)) * 0x85EBCA6B) & _MASK32
    x = ((x ^ (x >> 13)) * 0xC2B2AE35) & _MASK32
    return x ^ (x >> 16)


def _rotl(value, amount):
    return Cat(value[32 - amount:], value[:32 - amount])


def _check_int(component, what, value, low, high=None):
    if not isinstance(value, int) or isinstance(value, bool):
        component._MustUse__silence = True      # never built: no "unused" warning
        raise TypeError(f"{what} must be an integer, not {value!r}")
    if value < low or (high is not None and value > high):
        component._MustUse__silence = True
        bounds = f"from {low} to {high}" if high is not None else f"at least {low}"
        raise ValueError(f"{what} must be {bounds}, not {value!r}")


class FaultInjector(wiring.Component):
    """Drops, corrupts, duplicates and delays packets of one link at configured rates.

    Parameters
    ----------
    data_width : int
        As for :func:`~nicoll.hw.sim.fcs.link_stream`.
    link : int
        This link's index (0 to 255): mixed into the seed, and matched by ``target_link``.
    max_packet_beats : int
        The longest packet that can be duplicated (the replay memory's entries).

    Members
    -------
    i : ``In(link_stream(data_width))``
    o : ``Out(link_stream(data_width))``
    config : ``In(fault_config_layout())``
    counters : ``Out(fault_counters_layout())``
    """

    def __init__(self, data_width, *, link, max_packet_beats):
        _check_int(self, "link", link, 0, 255)
        _check_int(self, "max_packet_beats", max_packet_beats, 1)
        try:
            self._layout = link_beat_layout(data_width)
        except (TypeError, ValueError):
            self._MustUse__silence = True
            raise
        self._data_width = data_width
        self._link = link
        self._max_packet_beats = max_packet_beats
        super().__init__({
            "i": In(link_stream(data_width)),
            "o": Out(link_stream(data_width)),
            "config": In(fault_config_layout()),
            "counters": Out(fault_counters_layout()),
        })

    @property
    def link(self):
        return self._link

    @property
    def max_packet_beats(self):
        return self._max_packet_beats

    def _seeded(self, seed):
        """The generator's four words for ``seed`` on this link.  The last is a nonzero
        constant, so the state is never all zeros (xorshift's one fixed point)."""
        k = [_mix32(4 * self._link + n + 1) for n in range(4)]
        return [seed ^ k[0], _rotl(seed, 11) ^ k[1], _rotl(seed, 22) ^ k[2], k[3] | 1]

    def elaborate(self, platform):
        m = Module()
        cfg, beat = self.config, self.i.payload
        most = self._max_packet_beats
        nbytes = self._data_width // 8

        # Epoch: the register values as they stand after a reload, in the cycle of the reload
        # (so a packet that starts in that cycle draws from the new seed).
        loaded = Signal()
        epoch = Signal(8)
        reload = ~loaded | (cfg.epoch != epoch)
        m.d.sync += [loaded.eq(1), epoch.eq(cfg.epoch)]

        def after_reload(register, value):
            m.d.sync += register.eq(Mux(reload, 0, register) + value)

        # The generator: five xorshift128 outputs per packet; the last four are its next state.
        state = [Signal(32, name=f"prng{n}") for n in range(4)]
        now = [Signal(32, name=f"prng_now{n}") for n in range(4)]
        for word, register, seeded in zip(now, state, self._seeded(cfg.seed)):
            m.d.comb += word.eq(Mux(reload, seeded, register))
        words = now
        draws = []
        for n in range(5):
            x, w = words[0], words[3]
            t = x ^ (x << 11)[:32]
            out = Signal(32, name=f"draw{n}")
            m.d.comb += out.eq(w ^ (w >> 19) ^ t ^ (t >> 8))
            draws.append(out)
            words = words[1:] + [out]
        draw_drop, draw_flip, draw_duplicate, draw_delay, draw_where = draws

        # The targeted mode: packets of the target kind since the epoch change.
        first = Signal(init=1)                  # the next beat taken starts a packet
        kind_count = Signal(32)
        kind_match = beat.data[:PacketKind.as_shape().width] == cfg.target_kind
        hit = ((cfg.target_link == self._link) & kind_match
               & (Mux(reload, 0, kind_count) == cfg.target_index))

        def targeted(action):
            return hit & (cfg.target_action == action)

        # A packet's faults, drawn at its first beat and held for its other beats.
        new_drop = (draw_drop < cfg.drop) | targeted(FaultAction.DROP)
        new_flip = ((draw_flip < cfg.flip) | targeted(FaultAction.FLIP)) & ~new_drop
        new_duplicate = (((draw_duplicate < cfg.duplicate) | targeted(FaultAction.DUPLICATE))
                         & ~new_drop)
        new_delay = (draw_delay < cfg.delay) & ~new_drop
        held_drop, held_flip, held_duplicate = Signal(), Signal(), Signal()
        drop = Mux(first, new_drop, held_drop)
        flip = Mux(first, new_flip, held_flip)  # still to do in this packet
        duplicate = Mux(first, new_duplicate, held_duplicate)

        # Where the flip goes: beat `flip_beat` (or the last, if the packet is shorter), byte
        # `flip_byte` (or the lowest kept byte of the beat, if that one is not kept).
        held_beat = Signal(range(most))
        held_byte = Signal(range(nbytes))
        held_bit = Signal(3)
        flip_beat = Mux(first, draw_where[16:] % most, held_beat)
        chosen_byte = Mux(first, draw_where[3:16] % nbytes, held_byte)
        flip_bit = Mux(first, draw_where[:3], held_bit)
        index = Signal(range(most + 1))         # the beat's place in its packet (saturates)
        flip_byte = Signal(range(nbytes))
        m.d.comb += flip_byte.eq(chosen_byte)
        with m.If(~beat.keep.bit_select(chosen_byte, 1)):
            for k in reversed(range(nbytes)):
                with m.If(beat.keep[k]):
                    m.d.comb += flip_byte.eq(k)
        flip_now = flip & ((index >= flip_beat) | beat.last) & beat.keep.any()
        passing = Signal(self._layout)
        m.d.comb += [passing.eq(beat),
                     passing.data.eq(beat.data ^ (flip_now << Cat(flip_bit, flip_byte)))]

        # Delay: the first beat is held until `hold` has counted delay_cycles down.
        delaying = Signal()                     # counting
        delayed = Signal()                      # counted: the first beat may go
        hold = Signal(16)
        want_delay = first & new_delay
        block = want_delay & ~(delayed | (delaying & (hold == 0)) | (cfg.delay_cycles == 0))

        # Duplicate: the beats sent are stored, then replayed after the last.
        store = Memory(shape=self._layout, depth=most, init=[])
        m.submodules.store = store
        store_wr = store.write_port()
        store_rd = store.read_port(domain="comb")
        replaying = Signal()
        replay_ptr = Signal(range(most))
        replay_last = Signal(range(most))
        fits = index < most

        with m.If(replaying):
            m.d.comb += [self.o.valid.eq(1), self.o.payload.eq(store_rd.data),
                         self.i.ready.eq(0)]
        with m.Else():
            m.d.comb += [self.o.valid.eq(self.i.valid & ~drop & ~block),
                         self.o.payload.eq(passing),
                         self.i.ready.eq(drop | (self.o.ready & ~block))]
        take = self.i.valid & self.i.ready
        sent = take & ~drop
        replay = sent & beat.last & duplicate & fits
        m.d.comb += [store_wr.addr.eq(index), store_wr.data.eq(passing),
                     store_wr.en.eq(sent & duplicate & fits), store_rd.addr.eq(replay_ptr)]

        with m.If(take):
            m.d.sync += [
                first.eq(beat.last),
                index.eq(Mux(beat.last, 0, Mux(fits, index + 1, index))),
                held_drop.eq(drop), held_flip.eq(flip & ~flip_now),
                held_duplicate.eq(duplicate & fits),
                held_beat.eq(flip_beat), held_byte.eq(chosen_byte), held_bit.eq(flip_bit),
            ]
        with m.If(replay):
            m.d.sync += [replaying.eq(1), replay_ptr.eq(0), replay_last.eq(index)]
        with m.If(replaying & self.o.ready):
            m.d.sync += replay_ptr.eq(replay_ptr + 1)
            with m.If(replay_ptr == replay_last):
                m.d.sync += replaying.eq(0)

        with m.If(take & first):
            m.d.sync += [delaying.eq(0), delayed.eq(0)]
        with m.Elif(delaying):
            with m.If(hold == 0):
                m.d.sync += [delaying.eq(0), delayed.eq(1)]
            with m.Else():
                m.d.sync += hold.eq(hold - 1)
        with m.Elif(block & self.i.valid & ~replaying & ~delayed):
            m.d.sync += [delaying.eq(1), hold.eq(cfg.delay_cycles - 1)]

        start = take & first
        with m.If(start):
            m.d.sync += [register.eq(draw) for register, draw in zip(state, draws[1:])]
        with m.Else():
            m.d.sync += [register.eq(word) for register, word in zip(state, now)]
        after_reload(kind_count, start & kind_match)
        counters = self.counters
        after_reload(counters.packets, start)
        after_reload(counters.dropped, start & new_drop)
        after_reload(counters.delayed, start & new_delay)
        after_reload(counters.flipped, take & flip_now)
        after_reload(counters.duplicated, replay)
        return m
