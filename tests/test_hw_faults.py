"""FaultInjector: a wire at rates 0; drop, flip, duplicate and delay as specified, alone and
together, under backpressure; the targeted mode; the same seed gives the same faults and the
epoch restarts the generator and clears the counters.  Downstream, FcsCheck drops every
corrupted packet and passes every other one."""

import gc
import random
import warnings

import pytest
from amaranth.hdl import Elaboratable, Fragment, Module

from nicoll.hw.sim.faults import (FaultAction, FaultInjector, fault_config_layout,
                                  fault_counters_layout)
from nicoll.hw.sim.fcs import FcsCheck, packet_fcs
from nicoll.sim.testbench import run_testbenches, stream_put

from link_helpers import random_packets

LINK = 5
FULL = 2**32 - 1                                # a rate of (almost) every packet
COUNTERS = tuple(fault_counters_layout().members)
ZERO = dict.fromkeys(COUNTERS, 0)


def link_packets(rng, count, width, *, longest, shortest=1, keep="tail", kinds=range(1, 8)):
    """``count`` packets of beat dicts (:func:`link_helpers.random_packets`) with the FCS on
    the last beat; the first beat's data starts with a kind from ``kinds``."""
    packets = random_packets(rng, count, width, longest=longest, shortest=shortest, keep=keep)
    for packet in packets:
        for beat in packet:
            beat["fcs"] = 0
        packet[0]["data"] = packet[0]["data"] & ~0xF | rng.choice(kinds)
        packet[-1]["fcs"] = packet_fcs([(b["data"], b["keep"]) for b in packet])
    return packets


def config(**fields):
    values = {"seed": 1, "target_action": FaultAction.NONE}
    values.update(fields)
    return values


def as_dict(beat):
    return {name: int(beat[name]) for name, _ in beat.shape()}


def split(beats):
    """Beat dicts into packets, at each last beat."""
    packets, packet = [], []
    for beat in beats:
        packet.append(beat)
        if beat["last"]:
            packets.append(packet)
            packet = []
    assert not packet, "a partial packet at the end"
    return packets


def fcs_ok(packet):
    return packet_fcs([(b["data"], b["keep"]) for b in packet]) == packet[-1]["fcs"]


def run_phases(dut, phases, *, in_stall=0.0, out_stall=0.0, seed=0, port=None, wire=False,
               watch=(), read=None):
    """Each phase is ``(config, packets)``: set the config, send the packets with random
    pauses (the sink applies random backpressure throughout), wait until ``o`` has been idle
    for a few cycles, and read the counters.  ``port`` is the injector (``dut`` may hold it);
    ``watch`` names other streams of ``dut`` whose beats to collect too, ``read`` other
    signals to read at the end of each phase.  With ``wire``, every cycle checks that ``o``
    is ``i``.  Returns one dict per phase: ``out`` (packets seen on ``dut.o``), ``counters``,
    ``offered`` (cycle each packet's first beat was first offered on ``i``), ``first_out``
    (cycle each packet on ``o`` began), ``in`` (cycles of the beats taken), each watched
    stream's packets and each read signal's value."""
    port = port or dut
    rng = random.Random(f"source{seed}")
    srng = random.Random(f"sink{seed}")
    read = read or {}
    log = {"out": [], "first_out": [], "in": [], "offered": [], "wire_errors": 0,
           **{name: [] for name in watch}}
    results = []

    async def source(ctx):
        for cfg, packets in phases:
            marks = {key: len(log[key]) for key in ("out", "first_out", "in", "offered", *watch)}
            ctx.set(port.config, cfg)
            for beat in (beat for packet in packets for beat in packet):
                while rng.random() < in_stall:
                    ctx.set(port.i.valid, 0)
                    await ctx.tick()
                await stream_put(ctx, dut.i, beat)
            # Drained: nothing on o, nor leaving the injector (a replay, a packet the check
            # is storing), for a few cycles.
            idle = 0
            while idle < 4:
                *_, valid, inner = await ctx.tick().sample(dut.o.valid, port.o.valid)
                idle = 0 if valid or inner else idle + 1
            counters = ctx.get(port.counters)
            result = {key: log[key][marks[key]:] for key in ("first_out", "in", "offered")}
            result["counters"] = {name: int(getattr(counters, name)) for name in COUNTERS}
            for name in ("out", *watch):
                result[name] = split(log[name][marks[name]:])
            result.update({name: ctx.get(signal) for name, signal in read.items()})
            results.append(result)

    async def sink(ctx):
        while True:
            ctx.set(dut.o.ready, srng.random() >= out_stall)
            await ctx.tick()

    async def monitor(ctx):
        cycle = 0
        starting = True                         # the next beat on i starts a packet
        offered = False
        out_starting = True                     # the next beat on o starts a packet
        streams = [(dut.o.valid, dut.o.ready, dut.o.payload)]
        streams += [(s.valid, s.ready, s.payload) for s in (getattr(dut, n) for n in watch)]
        flat = [signal for stream in streams for signal in stream]
        while True:
            sampled = await ctx.tick().sample(port.i.valid, port.i.ready, port.i.payload, *flat)
            iv, ir, ip, *values = sampled[-3 - len(flat):]
            if iv and starting and not offered:
                log["offered"].append(cycle)
                offered = True
            if iv and ir:
                log["in"].append(cycle)
                starting, offered = bool(ip.last), False
            ov, orr, op = values[:3]
            if wire and (ov != iv or orr != ir or (iv and as_dict(op) != as_dict(ip))):
                log["wire_errors"] += 1
            if ov and orr:
                log["out"].append(as_dict(op))
                if out_starting:
                    log["first_out"].append(cycle)
                out_starting = bool(op.last)
            for n, name in enumerate(watch):
                v, r, p = values[3 * (n + 1):3 * (n + 2)]
                if v and r:
                    log[name].append(as_dict(p))
            cycle += 1

    run_testbenches(dut, source, background=[sink, monitor], watchdog_cycles=50_000)
    for result in results:
        result["wire_errors"] = log["wire_errors"]
    return results


def injector(width=64, *, link=LINK, most=4):
    return FaultInjector(width, link=link, max_packet_beats=most)


def one_bit_apart(sent, got):
    """(beat, bit) where ``got`` differs from ``sent`` by one data bit, else None."""
    if len(sent) != len(got):
        return None
    diffs = []
    for k, (a, b) in enumerate(zip(sent, got)):
        if {**a, "data": 0} != {**b, "data": 0}:
            return None
        delta = a["data"] ^ b["data"]
        if delta:
            diffs.append((k, delta))
    if len(diffs) != 1 or diffs[0][1] & (diffs[0][1] - 1):
        return None
    return diffs[0][0], diffs[0][1].bit_length() - 1


STALLS = [(0.0, 0.0), (0.4, 0.5)]


@pytest.mark.parametrize("in_stall,out_stall", STALLS)
@pytest.mark.parametrize("width", [64, 256])
def test_rates_zero_is_a_wire(width, in_stall, out_stall):
    rng = random.Random(width)
    packets = link_packets(rng, 30 if width == 64 else 15, width, longest=6)
    # Everything set but the rates and the action: the delay's length, a seed, and a target
    # the first packet matches.
    cfg = config(seed=0x1234, delay_cycles=9, target_link=LINK, target_index=0,
                 target_kind=packets[0][0]["data"] & 0xF)
    result, = run_phases(injector(width), [(cfg, packets)], in_stall=in_stall,
                         out_stall=out_stall, seed=f"{width}{in_stall}", wire=True)
    assert result["wire_errors"] == 0
    assert result["out"] == packets
    assert result["counters"] == {**ZERO, "packets": len(packets)}
    if in_stall == out_stall == 0:
        assert result["in"] == list(range(sum(map(len, packets))))


@pytest.mark.parametrize("in_stall,out_stall", STALLS)
def test_drop_swallows_whole_packets(in_stall, out_stall):
    rng = random.Random(1)
    packets = link_packets(rng, 30, 64, longest=6)
    # Drop excludes the others: with every rate full, nothing is flipped, duplicated or held.
    every = config(drop=FULL, flip=FULL, duplicate=FULL, delay=FULL, delay_cycles=20)
    quarter = config(drop=2**30, seed=3, epoch=1)
    first, second = run_phases(injector(), [(every, packets), (quarter, packets)],
                               in_stall=in_stall, out_stall=out_stall, seed=in_stall)
    assert first["out"] == []
    assert first["counters"] == {**ZERO, "packets": len(packets), "dropped": len(packets)}
    if in_stall == 0:
        assert first["in"] == list(range(sum(map(len, packets))))    # never refused
    # A quarter: the others pass whole, in order.
    dropped = second["counters"]["dropped"]
    assert 0 < dropped < len(packets) // 2
    assert second["counters"] == {**ZERO, "packets": len(packets), "dropped": dropped}
    assert len(second["out"]) == len(packets) - dropped
    it = iter(packets)
    assert all(any(p == q for q in it) for p in second["out"])    # a subsequence


@pytest.mark.parametrize("in_stall,out_stall", STALLS)
@pytest.mark.parametrize("width,keep", [(64, "tail"), (64, "random"), (256, "random")])
def test_flip_inverts_one_kept_bit(width, keep, in_stall, out_stall):
    rng = random.Random(f"{width}{keep}")
    packets = link_packets(rng, 40 if width == 64 else 20, width, longest=6, keep=keep)
    result, = run_phases(injector(width, most=6), [(config(flip=FULL, seed=77), packets)],
                         in_stall=in_stall, out_stall=out_stall, seed=f"{width}{in_stall}")
    assert result["counters"] == {**ZERO, "packets": len(packets), "flipped": len(packets)}
    assert len(result["out"]) == len(packets)
    places = set()
    for sent, got in zip(packets, result["out"]):
        where = one_bit_apart(sent, got)
        assert where is not None, (sent, got)
        beat, bit = where
        assert sent[beat]["keep"] >> (bit // 8) & 1         # in a kept byte
        assert got[-1]["fcs"] == sent[-1]["fcs"] and not fcs_ok(got)
        places.add((beat, bit))
    # The place is drawn: many beats and bits, not one fallback.
    assert len(places) > len(packets) // 2
    assert len({beat for beat, _ in places}) >= 3


class InjectorThenCheck(Elaboratable):
    """A FaultInjector, then an FcsCheck: ``i`` is the injector's, ``o`` the check's, and
    ``mid`` the stream between them."""

    def __init__(self, width, most):
        self.injector = FaultInjector(width, link=LINK, max_packet_beats=most)
        self.check = FcsCheck(width, max_packet_beats=most)
        self.i, self.o, self.mid = self.injector.i, self.check.o, self.injector.o

    def elaborate(self, platform):
        m = Module()
        m.submodules.injector = injector = self.injector
        m.submodules.check = check = self.check
        m.d.comb += [check.i.valid.eq(injector.o.valid), injector.o.ready.eq(check.i.ready),
                     check.i.payload.eq(injector.o.payload)]
        return m


@pytest.mark.parametrize("in_stall,out_stall", STALLS)
def test_check_downstream_catches_every_flip(in_stall, out_stall):
    # Every fault at once: what the check passes is exactly what left the injector intact.
    width, most = 64, 4
    rng = random.Random(4)
    packets = link_packets(rng, 60, width, longest=most + 1, keep="random")
    cfg = config(drop=2**29, flip=2**31, duplicate=2**30, delay=2**30, delay_cycles=3,
                 seed=11)
    dut = InjectorThenCheck(width, most)
    result, = run_phases(dut, [(cfg, packets)], port=dut.injector, watch=("mid",),
                         read={"bad": dut.check.bad, "too_long": dut.check.too_long},
                         in_stall=in_stall, out_stall=out_stall, seed=in_stall)
    counters = result["counters"]
    assert all(counters[name] > 0 for name in COUNTERS), counters
    # A packet longer than the check stores is dropped as too long, whatever its FCS.
    fitting = [p for p in result["mid"] if len(p) <= most]
    intact = [p for p in fitting if fcs_ok(p)]
    broken = [p for p in fitting if not fcs_ok(p)]
    assert result["out"] == [[{n: v for n, v in b.items() if n != "fcs"} for b in p]
                             for p in intact]
    # Each broken packet is a flip; a flipped packet duplicated is broken twice.
    assert 0 < len(broken) <= 2 * counters["flipped"]
    assert result["bad"] == len(broken) > 0
    assert result["too_long"] == sum(len(p) > most for p in result["mid"]) > 0
    # What left the injector: each packet 0, 1 or 2 times (beside each other), in order.
    n = 0
    for sent in packets:
        copies = 0
        while n < len(result["mid"]) and (result["mid"][n] == sent or
                                          one_bit_apart(sent, result["mid"][n])):
            n, copies = n + 1, copies + 1
        assert copies <= (2 if len(sent) <= most else 1)
    assert n == len(result["mid"])


@pytest.mark.parametrize("in_stall,out_stall", STALLS)
@pytest.mark.parametrize("width", [64, 256])
def test_duplicate_sends_twice_back_to_back(width, in_stall, out_stall):
    most = 3
    rng = random.Random(width)
    packets = link_packets(rng, 30 if width == 64 else 12, width, longest=most + 2)
    result, = run_phases(injector(width, most=most), [(config(duplicate=FULL), packets)],
                         in_stall=in_stall, out_stall=out_stall, seed=f"d{in_stall}")
    fitting = sum(len(p) <= most for p in packets)
    assert 0 < fitting < len(packets)
    assert result["out"] == [q for p in packets for q in ([p, p] if len(p) <= most else [p])]
    assert result["counters"] == {**ZERO, "packets": len(packets), "duplicated": fitting}


@pytest.mark.parametrize("out_stall", [0.0, 0.5])
def test_delay_holds_the_first_beat(out_stall):
    rng = random.Random(2)
    packets = link_packets(rng, 20, 64, longest=4)
    cycles = 6
    result, = run_phases(injector(), [(config(delay=FULL, delay_cycles=cycles), packets)],
                         out_stall=out_stall, in_stall=0.3, seed=out_stall)
    assert result["out"] == packets
    assert result["counters"] == {**ZERO, "packets": len(packets), "delayed": len(packets)}
    waits = [out - offered for offered, out in zip(result["offered"], result["first_out"])]
    assert len(waits) == len(packets)
    if out_stall:
        assert min(waits) >= cycles
    else:
        assert waits == [cycles] * len(packets)        # no more than asked, either


def test_delay_at_half_rate_keeps_order():
    rng = random.Random(3)
    packets = link_packets(rng, 40, 64, longest=4)
    result, = run_phases(injector(), [(config(delay=2**31, delay_cycles=4, seed=5), packets)])
    delayed = result["counters"]["delayed"]
    assert 0 < delayed < len(packets)
    assert result["out"] == packets
    waits = [out - offered for offered, out in zip(result["offered"], result["first_out"])]
    assert sorted(set(waits)) == [0, 4] and waits.count(4) == delayed


@pytest.mark.parametrize("action", [FaultAction.DROP, FaultAction.FLIP, FaultAction.DUPLICATE])
def test_targeted_mode_hits_the_kth_packet_of_its_kind(action):
    rng = random.Random(action.value)
    kind, k = 3, 2
    packets = link_packets(rng, 24, 64, longest=4, kinds=(1, 3, 6))
    of_kind = [p for p, packet in enumerate(packets) if packet[0]["data"] & 0xF == kind]
    assert len(of_kind) > k + 1
    hit = of_kind[k]
    target = config(target_link=LINK, target_kind=kind, target_index=k, target_action=action)
    other_link = {**target, "target_link": LINK + 1}
    # Counted from each epoch change: the second phase is hit again; on another link, never.
    first, second, third = run_phases(
        injector(), [(target, packets), ({**target, "epoch": 1}, packets),
                     ({**other_link, "epoch": 2}, packets)], in_stall=0.2, out_stall=0.3)
    name = {FaultAction.DROP: "dropped", FaultAction.FLIP: "flipped",
            FaultAction.DUPLICATE: "duplicated"}[action]
    for result in (first, second):
        assert result["counters"] == {**ZERO, "packets": len(packets), name: 1}
        out = result["out"]
        if action == FaultAction.DROP:
            assert out == packets[:hit] + packets[hit + 1:]
        elif action == FaultAction.DUPLICATE:
            assert out == packets[:hit + 1] + packets[hit:]
        else:
            assert out[:hit] == packets[:hit] and out[hit + 1:] == packets[hit + 1:]
            assert one_bit_apart(packets[hit], out[hit]) is not None
    assert third["out"] == packets
    assert third["counters"] == {**ZERO, "packets": len(packets)}


MIXED = config(drop=2**30, flip=2**30, duplicate=2**30, delay=2**30, delay_cycles=2)


def test_same_seed_same_faults():
    rng = random.Random(6)
    packets = link_packets(rng, 40, 64, longest=4)

    def run(seed, link=LINK, stalls=(0.0, 0.0), run_seed=0):
        result, = run_phases(injector(link=link), [({**MIXED, "seed": seed}, packets)],
                             in_stall=stalls[0], out_stall=stalls[1], seed=run_seed)
        return result["out"], result["counters"]

    base = run(21)
    assert all(base[1][name] for name in COUNTERS), base[1]
    # The same seed and link, other timing: the same faults.
    assert run(21, stalls=(0.5, 0.5), run_seed=1) == base
    # Another seed, or another link: other faults.
    assert run(22)[0] != base[0]
    assert run(21, link=LINK + 1)[0] != base[0]


@pytest.mark.parametrize("seed", [21, 22])
def test_the_model_links_draw_what_the_injector_draws(seed):
    """The device model's links (:class:`nicoll.model.faults.ModelLinks`) run the injector's
    generator: on one packet sequence, with the rates and a target on top, they drop,
    duplicate, flip and delay the same packets and count the same."""
    from nicoll.hw.net.packet import PacketKind
    from nicoll.model.faults import ModelLinks

    rng = random.Random(seed)
    packets = link_packets(rng, 40, 64, longest=4, kinds=(1, 2, 3))
    cfg = {**MIXED, "seed": seed, "target_link": LINK, "target_kind": 3, "target_index": 4,
           "target_action": FaultAction.DUPLICATE}
    result, = run_phases(injector(), [(cfg, packets)], in_stall=0.3, out_stall=0.3)

    layout = fault_config_layout()
    word = 0
    for name, member in layout:
        value = cfg.get(name, 0)
        word |= int(getattr(value, "value", value)) << member.offset
    links = ModelLinks(LINK + 1)
    links.configure(word.to_bytes(-(-layout.size // 8), "little"))
    expected = []                           # (packet index, flipped) in order of leaving
    for p, packet in enumerate(packets):
        before = dict(links._counters[LINK])
        links._cross(LINK, PacketKind(packet[0]["data"] & 0xF), 1)
        after = links._counters[LINK]
        if after["dropped"] > before["dropped"]:
            continue
        copies = 2 if after["duplicated"] > before["duplicated"] else 1
        expected += [(p, after["flipped"] > before["flipped"])] * copies
    model_counts = {name: links._counters[LINK][name] for name in COUNTERS}
    assert model_counts == result["counters"]
    assert all(model_counts[name] for name in COUNTERS), model_counts

    out = result["out"]
    assert len(out) == len(expected)
    for got, (p, flipped) in zip(out, expected):
        if flipped:
            assert one_bit_apart(packets[p], got) is not None, p
        else:
            assert got == packets[p], p


def test_epoch_restarts_the_generator_and_clears_the_counters():
    rng = random.Random(8)
    packets = link_packets(rng, 30, 64, longest=4)
    cfg = {**MIXED, "seed": 40}
    first, cleared, again, later = run_phases(
        injector(), [(cfg, packets), ({**cfg, "epoch": 1}, []), ({**cfg, "epoch": 1}, packets),
                     ({**cfg, "epoch": 1}, packets)], in_stall=0.3, out_stall=0.3)
    assert all(first["counters"][name] for name in COUNTERS), first["counters"]
    assert cleared["counters"] == ZERO
    # From the reload the generator repeats itself; without one it goes on.
    assert again["out"] == first["out"] and again["counters"] == first["counters"]
    assert later["out"] != first["out"]
    assert later["counters"]["packets"] == 2 * len(packets)


def test_bad_parameters():
    with pytest.raises(TypeError, match=r"^link must be an integer, not '1'$"):
        FaultInjector(64, link="1", max_packet_beats=2)
    with pytest.raises(TypeError, match=r"^link must be an integer, not True$"):
        FaultInjector(64, link=True, max_packet_beats=2)
    with pytest.raises(ValueError, match=r"^link must be from 0 to 255, not 256$"):
        FaultInjector(64, link=256, max_packet_beats=2)
    with pytest.raises(ValueError, match=r"^link must be from 0 to 255, not -1$"):
        FaultInjector(64, link=-1, max_packet_beats=2)
    with pytest.raises(TypeError, match=r"^max_packet_beats must be an integer, not 2\.0$"):
        FaultInjector(64, link=0, max_packet_beats=2.0)
    with pytest.raises(ValueError, match=r"^max_packet_beats must be at least 1, not 0$"):
        FaultInjector(64, link=0, max_packet_beats=0)
    with pytest.raises(ValueError, match=r"^Data width must be a positive multiple of 8, not 4$"):
        FaultInjector(4, link=0, max_packet_beats=1)


def test_a_refused_injector_leaves_no_unused_warning():
    Fragment.get(injector(), None)              # Amaranth warns only once anything is built
    gc.collect()                                # other tests' leftovers warn outside
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for width, kwargs in [(64, {"link": 300, "max_packet_beats": 1}),
                              (64, {"link": 0, "max_packet_beats": 0}),
                              (12, {"link": 0, "max_packet_beats": 1})]:
            try:
                FaultInjector(width, **kwargs)
            except ValueError:
                pass
        injector()                              # the control: built, never used
        gc.collect()
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "FaultInjector" in messages[0], messages


def test_layouts():
    assert list(fault_config_layout().members) == [
        "drop", "flip", "duplicate", "delay", "delay_cycles", "seed", "epoch", "target_link",
        "target_kind", "target_index", "target_action"]
    assert [fault_config_layout().members[n] for n in ("delay_cycles", "epoch", "target_kind")] \
        == [16, 8, 4]
    assert list(fault_counters_layout().members) == ["packets", "dropped", "flipped",
                                                      "duplicated", "delayed"]
    assert [a.value for a in FaultAction] == [0, 1, 2, 3]
