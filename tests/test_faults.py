"""Faults on the simulated network (issue 22): what ``nicoll.Faults`` injects, that a call
under faults either returns the right answer or raises NicollError naming what happened
(never a wrong answer, never a wait without end), and that ``Cluster.reset()`` makes the
cluster usable again.

The simulated cases run on one small Verilator cluster built with fault injection (its own
xdist group, so it builds beside the suite's cluster) and, where the model's links can show
them (:mod:`nicoll.model.faults`), on a model cluster of the same configuration.  The sweep
draws its calls from the soak's generator (:func:`test_soak.soak_case`) and checks them the
same way; its size per rate is ``NICOLL_FAULT_CASES`` on Verilator (``make faults`` runs the
issue's 200) and ``NICOLL_FAULT_MODEL_CASES`` (200) on the model.
"""

import os

import numpy as np
import pytest

import nicoll
from nicoll import Faults, FaultTarget, NicollError
from nicoll.faults import FaultCounts, difference, link_index, pack_config, unpack_counters
from nicoll.hw.net.packet import PacketKind
from nicoll.hw.sim.faults import FaultAction, fault_config_layout
from nicoll.hw.sim.faulty_link import link_counters_layout

from test_soak import _run_and_check, soak_case


def _count(name, default):
    value = os.environ.get(name, str(default))
    if not value.isdigit():
        raise pytest.UsageError(f"{name} must be a non-negative number of cases, not {value!r}")
    return int(value)


#: Calls per rate of the sweep (the issue's figure is 200: ``make faults``).
FAULT_CASES = _count("NICOLL_FAULT_CASES", 8)


def _sweeps(text):
    """``NICOLL_FAULT_SWEEPS``: comma-separated ``rate:retries`` pairs."""
    try:
        pairs = [item.split(":") for item in text.split(",")]
        return [(float(rate), int(retries)) for rate, retries in pairs]
    except ValueError:
        raise pytest.UsageError(f"NICOLL_FAULT_SWEEPS must be rate:retries pairs such as "
                                f"1e-3:0,1e-3:3, not {text!r}") from None


#: The sweeps: each rate of drops, flips and duplicates, with the retries of each call.
FAULT_SWEEPS = _sweeps(os.environ.get("NICOLL_FAULT_SWEEPS", "1e-2:0,1e-3:3"))
#: The model's sweep: the issue's rates and size, which the model runs in seconds.
MODEL_FAULT_CASES = _count("NICOLL_FAULT_MODEL_CASES", 200)
MODEL_FAULT_SWEEPS = _sweeps(os.environ.get("NICOLL_FAULT_MODEL_SWEEPS",
                                            "1e-4:0,1e-3:0,1e-2:0,1e-3:3"))
NODES = 3
#: The fault cluster: small and cheap to build; a few integer pairs (no float unit).
PAIRS = [("sum", "int32"), ("max", "int32"), ("sum", "int64"), ("min", "uint8")]
KWARGS = dict(data_width=64, max_nodes=4, mem_size=1 << 14, alu_capabilities=PAIRS)
#: What the sweep draws from: the cluster's size, and counts its memory holds.
TABLE = dict(nodes=[NODES], most=300)


# -- the host side, no simulation ------------------------------------------------------------

@pytest.mark.parametrize("kwargs, text", [
    (dict(drop=-0.1), "between 0 and 1"), (dict(flip=1.5), "between 0 and 1"),
    (dict(duplicate="1e-3"), "probability"), (dict(delay=float("nan")), "probability"),
    (dict(drop=True), "probability"), (dict(seed=-1), "seed"), (dict(seed=1 << 32), "seed"),
    (dict(delay_cycles=1 << 16), "delay_cycles"), (dict(target=3), "FaultTarget"),
])
def test_bad_faults_are_refused_by_name(kwargs, text):
    with pytest.raises(NicollError, match=text):
        Faults(**kwargs)


@pytest.mark.parametrize("kwargs, text", [
    (dict(rank=-1), "rank"), (dict(rank=128), "rank"), (dict(rank=0, kind="ack"), "kind"),
    (dict(rank=0, index=-2), "index"),
    (dict(rank=0, action="corrupt"), "action"), (dict(rank=0, direction="up"), "direction"),
])
def test_bad_targets_are_refused_by_name(kwargs, text):
    with pytest.raises(NicollError, match=text):
        FaultTarget(**kwargs)


def test_the_configuration_is_packed_with_the_gateware_layout():
    """pack_config writes each field where the injectors read it (the layout is the one
    source), and rates become thresholds out of 2**32."""
    faults = Faults(drop=0.5, flip=1.0, duplicate=1e-4, delay=0.25, seed=0xDEADBEEF,
                    delay_cycles=77, target=FaultTarget(rank=2, kind="clear", index=5,
                                                        action="duplicate", direction="from_switch"))
    raw = pack_config(faults, epoch=9)
    # The layout's own decoding of the bits.
    view = fault_config_layout().from_bits(int.from_bytes(raw, "little"))
    fields = {name: view[name] for name in fault_config_layout().members}
    assert fields["drop"] == 1 << 31
    assert fields["flip"] == (1 << 32) - 1
    assert fields["duplicate"] == round(1e-4 * (1 << 32))
    assert fields["delay"] == 1 << 30
    assert fields["seed"] == 0xDEADBEEF and fields["delay_cycles"] == 77 and fields["epoch"] == 9
    assert fields["target_link"] == link_index(2, "from_switch") == 5
    assert fields["target_kind"] == PacketKind.CLEAR.value
    assert fields["target_index"] == 5
    assert fields["target_action"] == FaultAction.DUPLICATE
    off = pack_config(Faults(), epoch=1)
    assert fault_config_layout().from_bits(int.from_bytes(off, "little")).target_action \
        == FaultAction.NONE
    assert not Faults().active and Faults(delay=0.1).active


def test_counters_are_unpacked_and_differenced_per_link():
    layout = link_counters_layout()
    names = list(layout.members)

    def port(per_link):
        word = 0
        for k, counts in enumerate(per_link):
            for name, member in layout:
                word |= counts.get(name, 0) << (k * layout.size + member.offset)
        return word.to_bytes(-(-4 * layout.size // 8), "little")

    before = unpack_counters(port([{"packets": 10}, {"packets": 0xFFFF_FFFF}, {}, {}]), 4)
    after = unpack_counters(port([{"packets": 12, "dropped": 1}, {"packets": 3},
                                  {"fcs_bad": 2, "flipped": 2}, {}]), 4)
    assert set(before[0]) == set(names)
    assert unpack_counters(port([{}] * 4)) == unpack_counters(port([{}] * 4), 4)
    counts = difference(before, after)
    assert counts.packets == 2 + 4 + 0 + 0          # the second link's counter wrapped
    assert counts.dropped == 1 and counts.fcs_bad == 2 and counts.flipped == 2
    assert counts.lost == 3 and counts.injected == 3
    assert set(counts.links) == {(0, "to_switch"), (1, "to_switch")}
    assert "rank 0 to_switch: 1 dropped" in counts.summary()
    assert "no fault" in FaultCounts(packets=4).summary()


def test_retries_need_faults():
    with pytest.raises(NicollError, match="retries are for faults"):
        nicoll.Cluster(2, "model", retries=2)
    with pytest.raises(NicollError, match="non-negative int"):
        nicoll.Cluster(2, "model", retries=-1)
    with nicoll.Cluster(2, "model") as cl:
        assert cl.retries == 0
        with pytest.raises(NicollError, match="retries are for faults"):
            cl.retries = 1


def test_faults_are_refused_where_they_cannot_act():
    with pytest.raises(NicollError, match="nicoll.Faults"):
        nicoll.Cluster(2, "verilator", faults={"drop": 0.1})
    with nicoll.Cluster(2, "model") as cl:
        with pytest.raises(NicollError, match="without faults="):
            cl.faults = Faults(drop=0.1)


def test_reset_on_the_model_keeps_memory_and_clears_state():
    with nicoll.Cluster(3, "model") as cl:
        xs = [np.arange(10, dtype=np.int32) + r for r in range(3)]
        cl.barrier()
        cl.device(1).mem_write(0x200, b"kept")
        cl.reset()
        assert cl.device(1).mem_read(0x200, 4) == b"kept"
        assert cl.barrier_tree is None
        assert cl.barrier().seq == 0            # the units start again from barrier 0
        for y in cl.allreduce(xs, "sum"):
            assert np.array_equal(y, sum(xs))


# -- on the simulated network -----------------------------------------------------------------

@pytest.fixture(scope="module")
def verilator_faulty():
    with nicoll.Cluster(NODES, "verilator", faults=Faults(), **KWARGS) as cl:
        yield cl


@pytest.fixture(scope="module")
def model_faulty():
    with nicoll.Cluster(NODES, "model", faults=Faults(), **KWARGS) as cl:
        yield cl


#: The backends the shared cases run on: the model's links (:mod:`nicoll.model.faults`) and
#: the Verilator cluster's gateware.
FAULT_BACKENDS = [
    pytest.param("model", id="model"),
    pytest.param("verilator", id="verilator",
                 marks=[pytest.mark.verilator, pytest.mark.xdist_group("verilator_faults")]),
]


@pytest.fixture(params=FAULT_BACKENDS)
def faulty(request):
    return request.getfixturevalue(f"{request.param}_faulty")


def _inputs(count=700, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(-1000, 1000, count, dtype=np.int32) for _ in range(NODES)]


def _check_allreduce(cl, xs, algorithm="ring"):
    ys = cl.allreduce(xs, "sum", algorithm=algorithm)
    for r, y in enumerate(ys):
        assert np.array_equal(y, sum(xs)), f"rank {r}: wrong sum"
    return cl.last


def _fresh(cl, faults=Faults()):
    cl.reset()
    cl.faults = faults


def test_without_faults_every_packet_passes(faulty):
    _fresh(faulty)
    stats = _check_allreduce(faulty, _inputs())
    counts = stats.faults
    assert isinstance(counts, FaultCounts)
    assert counts.packets >= sum(stats.packets) > 0     # every packet crosses two links
    assert counts.injected == 0 and counts.lost == 0 and counts.links == {}


@pytest.mark.parametrize("action, kind, index, counter", [
    ("drop", "data", 0, "dropped"), ("drop", "data", 1, "dropped"),
    ("flip", "data", 1, "fcs_bad"), ("drop", "clear", 0, "dropped"),
    ("drop", "clear", 1, "dropped"), ("flip", "clear", 1, "fcs_bad"),
    ("drop", "clear", 2, "dropped"),
])
def test_a_lost_packet_is_sent_again_and_the_call_is_right(faulty, action, kind, index,
                                                           counter):
    """One packet lost on rank 1's link (dropped, or corrupted and dropped by the CRC check):
    a data packet, a clear-to-send, or one of the delivery protocol's packets (the CLEAR
    kind carries both; which the index hits depends on the order they leave).  The engines
    send it again (docs/faults.md, "Packet-level recovery") and the call's answer is right,
    in one try; a lost data packet costs data packets sent again."""
    xs = _inputs()
    _fresh(faulty)
    clean = _check_allreduce(faulty, xs)
    faulty.faults = Faults(target=FaultTarget(rank=1, kind=kind, index=index, action=action))
    stats = _check_allreduce(faulty, xs)
    assert stats.tries == 1
    assert getattr(stats.faults, counter) == 1 and stats.faults.lost == 1, stats.faults
    if kind == "data":
        assert sum(stats.packets) > sum(clean.packets), (stats.packets, clean.packets)
    else:
        assert sum(stats.packets) >= sum(clean.packets)


def test_a_dead_network_fails_the_call_by_name_and_reset_recovers(faulty):
    """Every packet lost: each sender's probes go unanswered, and the call ends with
    NicollError naming the ranks, ERRORS.lost and what the network did, within its budget;
    after cl.reset() the same call is right."""
    xs = _inputs()
    _fresh(faulty, Faults(drop=1.0))
    with pytest.raises(NicollError) as info:
        faulty.allreduce(xs, "sum", algorithm="ring")
    text = str(info.value)
    assert "rank" in text and "lost" in text and "dropped" in text, text
    assert "cl.reset()" in text
    _fresh(faulty)
    _check_allreduce(faulty, xs)


@pytest.mark.parametrize("kind, direction", [
    ("repack_register", "to_switch"), ("repack_in", "to_switch"),
    ("repack_notice", "from_switch"), ("repack_out", "from_switch"),
])
def test_a_lost_repack_packet_fails_the_exchange_and_reset_recovers(faulty, kind, direction):
    """The aggregate exchange (seed 003) loses one of rank 1's registrations, messages,
    notices or results: NicollError with what the network did; after a reset it is right."""
    rng = np.random.default_rng(5)
    xs = [rng.integers(0, 1 << 30, NODES * 4, dtype=np.int32) for _ in range(NODES)]
    want = [np.concatenate([x[4 * j:4 * j + 4] for x in xs]) for j in range(NODES)]
    _fresh(faulty, Faults(target=FaultTarget(rank=1, kind=kind, index=0, action="drop",
                                             direction=direction)))
    with pytest.raises(NicollError, match=f"rank 1 {direction}: 1 dropped"):
        faulty.alltoall(xs, "aggregate")
    _fresh(faulty)
    for j, y in enumerate(faulty.alltoall(xs, "aggregate")):
        assert np.array_equal(y, want[j]), f"rank {j}"


@pytest.mark.parametrize("kind", ["data", "clear"])
def test_a_duplicate_is_never_taken_twice(faulty, kind):
    """A packet that arrives twice is taken once: the receiver drops a data packet behind
    the bytes it took, and a copy of a clear-to-send sets what the first set.  The answer is
    right, never a sum that counts it twice."""
    xs = _inputs()
    _fresh(faulty, Faults(target=FaultTarget(rank=2, kind=kind, index=0, action="duplicate")))
    _check_allreduce(faulty, xs)
    assert faulty.last.faults.duplicated == 1 and faulty.last.tries == 1


def test_a_lost_barrier_notice_fails_the_barrier_and_reset_recovers(faulty):
    _fresh(faulty)
    faulty.barrier()
    faulty.faults = Faults(target=FaultTarget(rank=2, kind="barrier", index=0, action="drop"))
    with pytest.raises(NicollError, match="1 dropped") as info:
        faulty.barrier()
    # Rank 2's completion never reaches the root: no rank is released, and each is named.
    assert "was not released" in str(info.value)
    assert ("at 3 of 3 ranks: rank 0 (in barrier 1), rank 1 (in barrier 1), "
            "rank 2 (in barrier 1)") in str(info.value)
    _fresh(faulty)
    assert faulty.barrier().seq == 0
    assert faulty.barrier().seq == 1


def test_a_lost_release_names_the_one_rank_not_released(faulty):
    """Rank 2 is a leaf of the 3-node tree: the one barrier notice that comes to it is its
    release, and only it stays behind."""
    _fresh(faulty)
    faulty.barrier()
    faulty.faults = Faults(target=FaultTarget(rank=2, kind="barrier", index=0, action="drop",
                                              direction="from_switch"))
    with pytest.raises(NicollError, match="1 dropped") as info:
        faulty.barrier()
    assert "at 1 of 3 ranks: rank 2 (in barrier 1);" in str(info.value)
    _fresh(faulty)
    assert faulty.barrier().seq == 0


@pytest.mark.parametrize("call", ["alltoall", "barrier"])
def test_a_retry_recovers_a_lost_packet(faulty, call):
    """With retries, a call that lost a packet the engines do not send again (a repack
    registration, a barrier notice) is run again after a reset and comes back right;
    cl.last says it took two tries and why the first failed."""
    rng = np.random.default_rng(5)
    xs = [rng.integers(0, 1 << 30, NODES * 4, dtype=np.int32) for _ in range(NODES)]
    kind = "repack_register" if call == "alltoall" else "barrier"
    _fresh(faulty, Faults(target=FaultTarget(rank=1, kind=kind, index=0, action="drop")))
    faulty.retries = 1
    try:
        if call == "alltoall":
            for j, y in enumerate(faulty.alltoall(xs, "aggregate")):
                assert np.array_equal(y, np.concatenate([x[4 * j:4 * j + 4] for x in xs]))
        else:
            assert faulty.barrier().seq == 0
    finally:
        faulty.retries = 0
    stats = faulty.last
    assert stats.tries == 2 and len(stats.failed_tries) == 1
    assert "1 dropped" in stats.failed_tries[0]
    assert stats.faults.injected == 0           # the retry ran without the target


@pytest.mark.verilator
@pytest.mark.xdist_group("verilator_faults")
def test_reset_brings_every_node_and_link_back_to_power_on(verilator_faulty):
    """After a failed call the engines hold their errors, the links their counts and the
    cycle counters run on; cl.reset() clears all of it (the nodes' reset reaches them) and
    keeps device memory."""
    _fresh(verilator_faulty, Faults(drop=1.0))
    with pytest.raises(NicollError, match="dropped"):
        verilator_faulty.allreduce(_inputs(), "sum", algorithm="ring")
    assert any(dev.engine.errors() for dev in verilator_faulty.devices)
    verilator_faulty.device(1).mem_write(0x40, b"kept")
    before = verilator_faulty.device(0).cycles()
    verilator_faulty.reset()
    assert verilator_faulty.device(0).cycles() < min(before, 100)
    assert not any(dev.engine.errors() for dev in verilator_faulty.devices)
    assert verilator_faulty.fault_counts().packets == 0
    assert verilator_faulty.device(1).mem_read(0x40, 4) == b"kept"


@pytest.mark.verilator
@pytest.mark.xdist_group("verilator_faults")
def test_delays_cost_cycles_not_answers(verilator_faulty):
    xs = _inputs()
    _fresh(verilator_faulty)
    clean = _check_allreduce(verilator_faulty, xs).cycles
    verilator_faulty.faults = Faults(delay=1.0, delay_cycles=50, seed=3)
    slow = _check_allreduce(verilator_faulty, xs)
    assert slow.faults.delayed > 0 and slow.faults.lost == 0
    assert slow.cycles > clean


def _sweep(cl, rate, retries, cases):
    """``cases`` random calls (the soak's generator) under drops, flips and duplicates, each
    at ``rate`` per packet and link: each returns the right answer (checked as the soak checks
    it) or raises NicollError within its budget; after an error the cluster is reset and
    goes on.  With retries every call must come back right."""
    pairs = [(op, np.dtype(dtype)) for op, dtype in PAIRS]
    outcomes = {"right": 0, "error": 0, "retried": 0}
    injected = packets = 0
    cl.retries = retries
    try:
        for index in range(cases):
            case = soak_case("faults", index, pairs, table=TABLE)
            _fresh(cl, Faults(drop=rate, flip=rate, duplicate=rate, seed=index))
            try:
                # A packet sent again, or a copy that arrives, moves the counters: they are
                # checked against the plan only for a call that met no fault.
                _run_and_check(cl, case, cl.backend,
                               counters=lambda cl: not cl.last.faults.injected)
                outcomes["right"] += 1
                outcomes["retried"] += cl.last.tries > 1
            except NicollError as exc:
                assert "cl.reset()" in str(exc), exc
                outcomes["error"] += 1
            counts = cl.fault_counts()
            injected += counts.injected
            packets += counts.packets
    finally:
        cl.retries = 0
    print(f"{cl.backend}, rate {rate}, retries {retries}: {outcomes}, {injected} faults in "
          f"{packets} packets (last tries)")
    assert packets > 0
    assert outcomes["right"] + outcomes["error"] == cases
    if retries:
        assert outcomes["error"] == 0, outcomes


@pytest.mark.verilator
@pytest.mark.xdist_group("verilator_faults")
@pytest.mark.parametrize("rate, retries", FAULT_SWEEPS)
def test_sweep_never_returns_a_wrong_answer(verilator_faulty, rate, retries):
    _sweep(verilator_faulty, rate, retries, FAULT_CASES)


@pytest.mark.parametrize("rate, retries", MODEL_FAULT_SWEEPS)
def test_model_sweep_never_returns_a_wrong_answer(model_faulty, rate, retries):
    """The issue's sweep at its full size on the model, whose links meet the same faults at
    the level of its messages (:mod:`nicoll.model.faults`)."""
    _sweep(model_faulty, rate, retries, MODEL_FAULT_CASES)


@pytest.mark.verilator
@pytest.mark.xdist_group("verilator_faults")
@pytest.mark.parametrize("seed", [1, 2])
def test_random_register_writes_then_reset_leave_a_working_cluster(verilator_faulty, seed):
    """Random words written to random registers of every node (every block, the controls
    that start runs included) and to addresses past the map, the cluster left to run on
    them: after cl.reset() a normal collective, a barrier and an aggregate exchange (the
    repack units' registers were written too) are right."""
    import random
    from nicoll.hw.regmap.generated import REGMAP
    rng = random.Random(seed)
    registers = [r.address for block in REGMAP.blocks for r in block.registers]
    end = max(registers) + 4
    _fresh(verilator_faulty)
    for _ in range(300):
        dev = verilator_faulty.device(rng.randrange(NODES))
        address = (rng.choice(registers) if rng.random() < 0.9
                   else rng.randrange(end, 1 << 16) & ~3)
        value = rng.choice([rng.getrandbits(32), rng.getrandbits(8), 1 << rng.randrange(32)])
        dev.transport.write32(address, value)
        if rng.random() < 0.05:
            dev.idle(rng.randrange(1, 2000))
    verilator_faulty.device(0).idle(5000)
    _fresh(verilator_faulty)
    _check_allreduce(verilator_faulty, _inputs(seed=seed))
    assert verilator_faulty.barrier().seq == 0
    xs = [np.arange(NODES * 4, dtype=np.int32) + 100 * r for r in range(NODES)]
    for j, y in enumerate(verilator_faulty.alltoall(xs, "aggregate")):
        assert np.array_equal(y, np.concatenate([x[4 * j:4 * j + 4] for x in xs])), j


@pytest.mark.verilator
@pytest.mark.xdist_group("verilator_faults")
def test_soak_under_random_link_stalls(verilator_faulty):
    """The soak's calls with random stalls on every link (each packet held 37 cycles with
    probability 0.2): the backpressure reaches every block's stream, and every answer is
    right."""
    pairs = [(op, np.dtype(dtype)) for op, dtype in PAIRS]
    delayed = 0
    for index in range(FAULT_CASES):
        case = soak_case("stalls", index, pairs, table=TABLE)
        _fresh(verilator_faulty, Faults(delay=0.2, delay_cycles=37, seed=index))
        _run_and_check(verilator_faulty, case, "verilator")
        delayed += verilator_faulty.fault_counts().delayed
    assert delayed > 0


@pytest.mark.xdist_group("amaranth_faults")
def test_faults_and_reset_on_the_amaranth_backend():
    """The Amaranth simulator runs the same links and the same reset: a duplicated data
    packet is dropped by its receiver and the answer is right (a lost packet would cost a
    probe's wait, PROBE_CYCLES, seconds of the Python simulator); after cl.reset() the call
    is right again."""
    xs = [np.arange(20, dtype=np.int32) * (r + 1) for r in range(2)]
    with nicoll.Cluster(2, "amaranth", data_width=64, max_nodes=2, mem_size=1 << 12,
                        alu_capabilities=[("sum", "int32")], repack_units=0,
                        faults=Faults(target=FaultTarget(rank=0, kind="data",
                                                         action="duplicate"))) as cl:
        for y in cl.allreduce(xs, "sum", algorithm="ring"):
            assert np.array_equal(y, xs[0] + xs[1])
        assert cl.last.faults.duplicated == 1 and cl.last.tries == 1
        cl.reset()
        cl.faults = Faults()
        for y in cl.allreduce(xs, "sum", algorithm="ring"):
            assert np.array_equal(y, xs[0] + xs[1])
        assert cl.last.faults.packets > 0 and cl.last.faults.lost == 0


@pytest.mark.verilator
@pytest.mark.xdist_group("verilator_faults")
def test_the_fault_bench_measures_goodput_and_a_lost_packet(verilator_faulty):
    """nicoll.sim.fault_bench's parts on the fault test's cluster: goodput 1 with no loss and
    0 when the network loses every packet; one lost packet costs cycles and packets sent
    again, not a retry."""
    from nicoll.sim import fault_bench
    xs = fault_bench.inputs(NODES, 2048, np.int32)
    verilator_faulty.retries = 1
    try:
        clean, in_nic = fault_bench.clean_run(verilator_faulty, xs)
        assert 0 < in_nic < clean
        runs, failed, tries, cycles, ratio, _ = fault_bench.goodput(verilator_faulty, xs, 0.0, clean,
                                                                     runs=1)
        # The host's polls fall at other cycles from run to run: a few % either way.
        assert (runs, failed, tries) == (1, 0, 1) and 0.9 < ratio < 1.1
        runs, failed, tries, cycles, ratio, _ = fault_bench.goodput(verilator_faulty, xs, 1.0, clean,
                                                                     runs=1)
        assert (failed, tries, ratio) == (1, 2, 0.0)
        base, lost, again = fault_bench.lost_packet(verilator_faulty, xs, 1)
        assert lost > base and again > 0
    finally:
        verilator_faulty.retries = 0
