"""The engine block's driver (nicoll.driver.engine) and its device model (nicoll.model.engine).

Lowering a schedule step into a COMMAND_LAYOUT command and packing it into CMD words, checked
by unpacking with the layout itself; then the model engine's register-level behaviour, reached
only through Device and its registers: push-time refusals, clear, go, arm at a cycle, the
rendezvous, device-side errors, barrier commands and the counters.
"""

import numpy as np
import pytest
from amaranth.lib import data

import nicoll
from nicoll import NicollError
from nicoll.driver import engine as eng
from nicoll.hw.regmap.generated import REGMAP
from nicoll.model.engine import MODEL_ALU_LATENCY
from nicoll.hw.engine import (COMMAND_LAYOUT, COMMAND_WORDS, DEFAULT_PACKET_BEATS,
                              DEFAULT_QUEUE_DEPTH, StepAction)
from nicoll.hw.ops import DType, ReduceOp
from nicoll.ops import combine
from nicoll.schedule import Piece, Region, Schedule, Step

from conftest import CLUSTER_KWARGS, NODES, cluster_kwargs

MEM_SIZE = CLUSTER_KWARGS["mem_size"]
MAX_NODES = CLUSTER_KWARGS["max_nodes"]
WIDTH = CLUSTER_KWARGS["data_width"] // 8


def _value(words):
    return sum(w << (32 * k) for k, w in enumerate(words))


def _const(fields):
    return data.Const(COMMAND_LAYOUT, _value(eng.pack(fields)))


# -- lowering and packing ------------------------------------------------------------------------

STEPS = {
    "exchange": Step(send_to=1, send=Region(0, 64), send_tag=3, recv_from=2, recv=Region(64, 64),
                     recv_tag=5, action=StepAction.REDUCE_LOCAL_FIRST, segments=2, fence=True),
    "send": Step(send_to=7, send=Region(128, 1000), send_tag=65535, segments=3),
    "strided-recv": Step(recv_from=4, recv=Region(8, 48, 8, 24), recv_tag=9,
                         action=StepAction.REDUCE_RECEIVED_FIRST),
    "strided-send": Step(send_to=0, send=Region(16, 40, 4, 12), recv_from=0, recv=Region(512, 40)),
    "barrier": Step(barrier=True),
}


@pytest.mark.parametrize("name", STEPS)
def test_lowered_steps_round_trip_through_the_layout(name):
    step = STEPS[name]
    fields = eng.lower(step, data_width=256, itemsize=4, max_packet_beats=DEFAULT_PACKET_BEATS)
    words = eng.pack(fields)
    assert len(words) == COMMAND_WORDS and all(0 <= w < 1 << 32 for w in words)
    c = data.Const(COMMAND_LAYOUT, _value(words))
    for half, peer, tag, region in (("send", "send_to", "send_tag", step.send),
                                    ("recv", "recv_from", "recv_tag", step.recv)):
        assert c[f"has_{half}"] == (region is not None)
        if region is None:
            assert (c[half].offset, c[half].length, c[peer], c[tag]) == (0, 0, 0, 0)
            continue
        assert (c[peer], c[tag]) == (getattr(step, peer), getattr(step, tag))
        assert (c[half].offset, c[half].length) == (region.offset, region.length)
        # A contiguous region has run = stride = 0.
        expected = (0, 0) if region.contiguous else (region.run, region.stride)
        assert (c[half].run, c[half].stride) == expected
    assert c.action == StepAction(step.action.value)
    assert (c.fence, c.barrier) == (step.fence, step.barrier)
    assert eng.unpack(words) == fields


@pytest.mark.parametrize("length, segments, data_width, cap, beats", [
    (1000, 3, 256, 256, 11),        # 32 beats of 32 bytes, 3 segments
    (1000, 3, 256, 8, 8),           # capped at the build's largest packet
    (1000, 3, 64, 256, 42),         # 125 beats of 8 bytes
    (1000, 1, 64, 256, 125),
    (4, 5, 256, 256, 1),            # never 0 for a step that sends
    (64, 2, 512, 256, 1),
])
def test_segments_become_packets(length, segments, data_width, cap, beats):
    step = Step(send_to=1, send=Region(0, length), segments=segments)
    fields = eng.lower(step, data_width=data_width, itemsize=4, max_packet_beats=cap)
    assert fields["packet_beats"] == beats
    assert _const(fields).packet_beats == beats


def test_a_step_that_sends_nothing_takes_the_default_packet():
    fields = eng.lower(STEPS["strided-recv"], data_width=256, itemsize=4, max_packet_beats=256)
    assert fields["packet_beats"] == 0


def test_reversed_pieces_lower_like_forward_ones():
    # The engine walks regions in ascending order; sender and receiver of a message always
    # agree on the order, so dropping it moves the same bytes to the same places.
    forward = Step(send_to=1, send=Region(0, 64), recv_from=1, recv=Region(64, 64),
                   action=StepAction.REDUCE_LOCAL_FIRST, segments=4)
    backward = Step(send_to=1, send=Region(0, 64), send_reversed=True, recv_from=1,
                    recv=Region(64, 64), recv_reversed=True, action=StepAction.REDUCE_LOCAL_FIRST,
                    segments=4)
    kwargs = dict(data_width=256, itemsize=4, max_packet_beats=256)
    assert eng.lower(forward, **kwargs) == eng.lower(backward, **kwargs)


@pytest.mark.parametrize("step, itemsize, message", [
    (Step(send_to=1, send=Region(0, 8), send_tag=1 << 16), 4,
     r"send_tag must be between 0 and 65535, not 65536"),
    (Step(recv_from=1, recv=Region(0, 8), recv_tag=70000), 4,
     r"recv_tag must be between 0 and 65535, not 70000"),
    (Step(send_to=1 << 16, send=Region(0, 8)), 4, r"send_to must be between 0 and 65535, not 65536"),
    (Step(recv_from=99999, recv=Region(0, 8)), 4,
     r"recv_from must be between 0 and 65535, not 99999"),
    (Step(send_to=1, send=Region(4, 8)), 8, r"does not fall on 8-byte element boundaries \(offset 4\)"),
    (Step(send_to=1, send=Region(1 << 32, 8)), 8,
     r"send region offset must be between 0 and 4294967295, not 4294967296"),
    ("step", 4, r"lower takes a nicoll.schedule.Step, not 'step'"),
])
def test_lower_refuses(step, itemsize, message):
    with pytest.raises(NicollError, match=message):
        eng.lower(step, data_width=256, itemsize=itemsize, max_packet_beats=256)


@pytest.mark.parametrize("fields, message", [
    ({"send_tag": 1 << 16}, r"command field send_tag is 16 bits wide; 65536 does not fit"),
    ({"send": {"offset": -1}}, r"command field send.offset is 32 bits wide; -1 does not fit"),
    ({"colour": 1}, r"COMMAND_LAYOUT has no field 'colour'"),
    ({"send": {"start": 1}}, r"COMMAND_LAYOUT has no field 'send.start'"),
    ({"action": 3}, r"command field action cannot be 3"),
])
def test_pack_refuses(fields, message):
    with pytest.raises(NicollError, match=message):
        eng.pack(fields)


def test_names_come_from_the_register_map():
    block = REGMAP.block("engine")
    assert eng.ERROR_NAMES == tuple(f.name for f in block.register("ERRORS").fields)
    assert set(eng.COUNTER_NAMES) == {"BYTES_SENT", "BYTES_RECEIVED", "PACKETS_SENT",
                                      "PACKETS_RECEIVED", "ALU_BEATS", "BUSY_CYCLES",
                                      "STALL_CYCLES"}
    for name in eng.__all__:
        assert hasattr(eng, name), name


# -- the model engine through its registers ---------------------------------------------------

@pytest.fixture(scope="module")
def cluster():
    with nicoll.Cluster(nodes=3, backend="model", **CLUSTER_KWARGS) as cl:
        yield cl


@pytest.fixture
def cl(cluster):
    for dev in cluster.devices:
        dev.engine.clear()
        dev.mem_write(0, bytes(MEM_SIZE))
    return cluster


def _push(dev, step, itemsize=4):
    dev.engine.push(dev.engine.command(step, itemsize))


def _push_words(dev, words):
    for k, word in enumerate(words):
        dev.regs.engine[f"CMD{k}"].write(word)
    dev.regs.engine.CONTROL.write_fields(push=1)


def _wait_done(cl, ranks):
    for _ in range(1000):
        if all(cl.device(r).engine.status().done for r in ranks):
            return
    raise AssertionError({r: cl.device(r).engine.status() for r in ranks})


def test_build_parameters(cl):
    engine = cl.device(0).engine
    assert engine.depth == DEFAULT_QUEUE_DEPTH
    assert engine.packet_beats == DEFAULT_PACKET_BEATS
    assert engine.alu_latency == MODEL_ALU_LATENCY
    assert engine.status() == eng.EngineStatus(queued=0, armed=False, busy=False, done=False,
                                               error=False, step=0)
    assert set(engine.counters()) == {name.lower() for name in eng.COUNTER_NAMES}


GOOD = Step(send_to=1, send=Region(0, 64), recv_from=2, recv=Region(64, 64))


def _with(data_width=256, **changes):
    """GOOD's command fields for a build of ``data_width`` with some fields changed (nested
    dicts merged)."""
    fields = eng.lower(GOOD, data_width=data_width, itemsize=4, max_packet_beats=256)
    for name, value in changes.items():
        if isinstance(value, dict):
            fields[name] = {**fields[name], **value}
        else:
            fields[name] = value
    return eng.pack(fields)


def _action_3(data_width=256):
    words = _with(data_width)
    value = _value(words) | 3 << COMMAND_LAYOUT["action"].offset
    return [(value >> (32 * k)) & 0xFFFF_FFFF for k in range(COMMAND_WORDS)]


def _aggregate(send_tag, data_width=256):
    """An aggregate command that passes every check but its group count's (seed 003)."""
    return _with(data_width, aggregate=1, send={"length": 4 * 64, "run": 0, "stride": 64},
                 recv={"length": 4 * 64, "run": 0, "stride": 64}, send_tag=send_tag)


def refusals(dev):
    """``{case: (command words, the ERRORS bits a push of it sets)}`` for ``dev``'s build (its
    memory, MAX_NODES and data width)."""
    mem, nodes, width = dev.mem_size, dev.max_nodes, dev.data_width

    def bad(**changes):
        return _with(width, **changes)

    return {
        "recv outside memory": (bad(recv={"offset": mem - 32}), {"region"}),
        "send past the end": (bad(send={"offset": mem, "length": 1}), {"region"}),
        "run longer than stride": (bad(send={"run": 16, "stride": 8}), {"region"}),
        "send_to >= MAX_NODES": (bad(send_to=nodes), {"peer"}),
        "recv_from >= MAX_NODES": (bad(recv_from=nodes + 7), {"peer"}),
        "reserved action": (_action_3(width), {"command"}),
        "barrier that sends": (bad(barrier=1, has_recv=0), {"command"}),
        "barrier that receives": (bad(barrier=1, has_send=0), {"command"}),
        # More destination groups than nodes (the gateware's slot product covers
        # ceil(log2(max_nodes)) bits of the group).
        "aggregate groups past MAX_NODES": (_aggregate(nodes + 1, width), {"command"}),
        "every fault at once": (bad(barrier=1, send_to=nodes, recv={"offset": mem}),
                                {"command", "peer", "region"}),
    }


#: The refusal table runs on every backend: the gateware's push checks and the model's
#: through the same driver and registers.
BACKENDS = [
    pytest.param("model"),
    pytest.param("amaranth", marks=pytest.mark.xdist_group("amaranth_driver")),
    pytest.param("verilator", marks=[pytest.mark.verilator, pytest.mark.xdist_group("verilator")]),
]


@pytest.fixture(scope="module", params=BACKENDS)
def any_cluster(request):
    with nicoll.Cluster(nodes=NODES[request.param], backend=request.param,
                        **cluster_kwargs(request.param)) as cl:
        yield cl


#: The table's cases, one test each on every backend (refusals() builds them for a build).
REFUSAL_CASES = ("recv outside memory", "send past the end", "run longer than stride",
                 "send_to >= MAX_NODES", "recv_from >= MAX_NODES", "reserved action",
                 "barrier that sends", "barrier that receives",
                 "aggregate groups past MAX_NODES", "every fault at once")


def test_the_refusal_table_covers_every_case_of_the_model(cl):
    # Every case the table builds is run, and together they set each ERRORS bit a push's
    # own fields can set.
    table = refusals(cl.device(0))
    assert set(table) == set(REFUSAL_CASES)
    bits = set().union(*(errors for _, errors in table.values()))
    assert bits == {"region", "peer", "command"}


@pytest.mark.parametrize("case", REFUSAL_CASES)
def test_a_refused_command_sets_its_error_and_is_not_queued(any_cluster, case):
    dev = any_cluster.device(0)
    dev.engine.clear()
    words, errors = refusals(dev)[case]
    _push(dev, GOOD)
    _push_words(dev, words)
    # On the gateware the verdict comes a few cycles after the push (a read at once saw no
    # bit on the Amaranth and Verilator clusters): the driver waits for it.
    dev.engine.wait_pushes(2)
    assert dev.engine.errors() == errors
    status = dev.engine.status()
    assert status.queued == 1 and status.error and not status.busy
    with pytest.raises(NicollError, match=r"engine of node 0 reports .*" + sorted(errors)[0]):
        dev.engine.check()
    dev.engine.clear()


@pytest.mark.parametrize("half", ["send", "recv"])
def test_a_strided_region_past_the_end_is_queued_and_stops_its_run(cl, half):
    """Its own fields pass (offset + length within memory), so it is queued, as the gateware
    queues it; its runs pass memory's end, so the half stops with ``region`` when it runs
    and nothing is written."""
    dev = cl.device(0)
    past = Region(MEM_SIZE - 64, 64, 8, 16)         # 8 runs 16 bytes apart: 112 bytes
    inside = Region(0, 64) if half == "recv" else Region(4096, 64)
    regions = {"send": past, "recv": inside} if half == "send" else {"send": inside, "recv": past}
    dev.mem_write(regions["send"].offset, np.arange(1, 65, dtype=np.uint8))
    _push(dev, Step(send_to=0, recv_from=0, **regions), itemsize=1)
    assert dev.engine.errors() == frozenset() and dev.engine.status().queued == 1
    dev.engine.go()
    status = dev.engine.status()
    assert dev.engine.errors() == {"region"}
    assert status.error and not status.busy and not status.done
    # The receiving bytes (the inside region, or the strided one's first 64 bytes) are
    # untouched: the fixture zeroed them, and no byte the message would carry is zero.
    written = regions["recv"].offset
    assert dev.mem_read(written, 64) == bytes(64)


def test_an_aggregate_of_max_nodes_groups_is_queued(cl):
    dev = cl.device(0)
    _push_words(dev, _aggregate(send_tag=MAX_NODES))
    assert dev.engine.errors() == frozenset()
    assert dev.engine.status().queued == 1


def test_halves_a_command_does_not_have_are_not_checked(cl):
    dev = cl.device(0)
    _push_words(dev, _with(has_send=0, send_to=MAX_NODES, send={"offset": MEM_SIZE}))
    assert dev.engine.errors() == frozenset()
    assert dev.engine.status().queued == 1


def test_a_full_queue_refuses(cl):
    dev = cl.device(0)
    words = _with()
    for _ in range(dev.engine.depth):
        _push_words(dev, words)
    assert dev.engine.errors() == frozenset()
    _push_words(dev, words)
    assert dev.engine.errors() == {"queue_full"}
    assert dev.engine.status().queued == dev.engine.depth


def test_push_while_running_refuses_and_clear_stops(cl):
    dev = cl.device(0)
    _push(dev, Step(recv_from=1, recv=Region(0, 32)))      # node 1 never sends
    dev.engine.go()
    assert dev.engine.status().busy
    _push(dev, GOOD)
    assert dev.engine.errors() == {"running"}
    status = dev.engine.status()
    assert status.queued == 1 and status.step == 0 and status.error
    dev.engine.clear()
    assert dev.engine.status() == eng.EngineStatus(queued=0, armed=False, busy=False, done=False,
                                                   error=False, step=0)
    assert dev.engine.errors() == frozenset()
    assert set(dev.engine.counters().values()) == {0}


def test_a_start_with_an_error_latched_does_not_run(cl):
    dev = cl.device(0)
    _push(dev, Step(send_to=0, send=Region(0, 32), recv_from=0, recv=Region(32, 32)))
    _push_words(dev, _with(send_to=MAX_NODES))
    dev.engine.go()
    status = dev.engine.status()
    assert not status.busy and not status.done and status.error and status.step == 0


def test_an_empty_queue_is_done_at_once(cl):
    dev = cl.device(0)
    dev.engine.go()
    status = dev.engine.status()
    assert status.done and not status.busy
    assert dev.engine.finished_at() == dev.engine.started_at()


def test_arm_starts_at_the_given_cycle(cl):
    dev = cl.device(0)
    dev.mem_write(0, np.arange(8, dtype=np.uint32))
    _push(dev, Step(send_to=0, send=Region(0, 32), recv_from=0, recv=Region(32, 32)))
    at = dev.cycles() + 400
    dev.engine.arm(at)
    status = dev.engine.status()
    assert status.armed and not status.busy and not status.done
    while dev.cycles() < at - 50:      # a status read is a few bus accesses
        assert not dev.engine.status().done
    while dev.cycles() < at:
        pass
    status = dev.engine.status()
    assert status.done and not status.armed and status.step == 1
    # Zero latency: the model finishes in its start cycle.
    assert dev.engine.started_at() == dev.engine.finished_at() == at
    assert np.frombuffer(dev.mem_read(32, 32), np.uint32).tolist() == list(range(8))
    # A cycle already past starts at once.
    dev.engine.arm(0)
    assert dev.engine.status().done
    assert dev.engine.started_at() > at


def test_a_message_moves_when_both_ends_are_there(cl):
    a, b = cl.device(0), cl.device(1)
    a.mem_write(0, np.arange(16, dtype=np.int32))
    _push(a, Step(send_to=1, send=Region(0, 64), send_tag=4))
    _push(b, Step(recv_from=0, recv=Region(128, 64), recv_tag=4))
    a.engine.go()
    assert a.engine.status().busy            # waits for the receiver
    b.engine.go()
    for dev in (a, b):
        assert dev.engine.status().done and dev.engine.status().step == 1
    assert np.frombuffer(b.mem_read(128, 64), np.int32).tolist() == list(range(16))


def test_results_do_not_depend_on_the_start_order(cl):
    # A three-rank ring allreduce started node by node in two orders gives the same bits.
    from nicoll import schedule as sc
    plan = sc.allreduce(3, 40, "float32", "sum", "ring")
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(40).astype(np.float32) for _ in range(3)]
    results = []
    for order in ((0, 1, 2), (2, 0, 1)):
        for r, dev in enumerate(cl.devices):
            dev.mem_write(0, xs[r])
            dev.engine.load(plan.schedules[r], "sum", "float32")
        for r in order:
            cl.device(r).engine.go()
        _wait_done(cl, range(3))
        results.append([cl.device(r).mem_read(0, 160) for r in range(3)])
    assert results[0] == results[1]
    assert len(set(results[0])) == 1


def test_reductions_follow_the_action_and_the_reduction_register(cl):
    a, b = cl.device(0), cl.device(1)
    # Two NaNs with different payloads: the result keeps the payload of one operand, so the
    # bits show which operand came first (nicoll.ops.combine is the ALU's arithmetic).
    local = np.array([0x7FC0_0001, 0x3F80_0000, 0xFF80_0000], np.uint32).view(np.float32)
    received = np.array([0x7FC0_0002, 0x4000_0000, 0x7F80_0000], np.uint32).view(np.float32)
    for action, first, second in ((StepAction.REDUCE_LOCAL_FIRST, local, received),
                                  (StepAction.REDUCE_RECEIVED_FIRST, received, local)):
        for dev in (a, b):
            dev.engine.clear()
        a.mem_write(0, received)
        b.mem_write(64, local)
        b.regs.engine.REDUCTION.write_fields(op=ReduceOp.SUM.value, dtype=DType.FLOAT32.value)
        _push(a, Step(send_to=1, send=Region(0, 12)))
        _push(b, Step(recv_from=0, recv=Region(64, 12), action=action))
        a.engine.go()
        b.engine.go()
        _wait_done(cl, (0, 1))
        want = combine("sum", first, second)
        assert b.mem_read(64, 12) == want.tobytes()
    # The element type is the register's: the same bytes as int16 pairs.
    for dev in (a, b):
        dev.engine.clear()
    a.mem_write(0, np.array([1, 2], np.int16))
    b.mem_write(64, np.array([3, 4], np.int16))
    b.regs.engine.REDUCTION.write_fields(op=ReduceOp.BXOR.value, dtype=DType.INT16.value)
    _push(a, Step(send_to=1, send=Region(0, 4)), itemsize=2)
    _push(b, Step(recv_from=0, recv=Region(64, 4), action=StepAction.REDUCE_LOCAL_FIRST), itemsize=2)
    a.engine.go()
    b.engine.go()
    _wait_done(cl, (0, 1))
    assert np.frombuffer(b.mem_read(64, 4), np.int16).tolist() == [3 ^ 1, 4 ^ 2]


def _exchange_with_error(cl, send_step, recv_step, reduction=None):
    a, b = cl.device(0), cl.device(1)
    b.mem_write(256, b"\x11" * 64)
    if reduction:
        b.regs.engine.REDUCTION.write_fields(op=reduction[0], dtype=reduction[1])
    _push(a, send_step)
    _push(b, recv_step)
    a.engine.go()
    b.engine.go()
    return a, b


@pytest.mark.parametrize("case", ["length", "alu missing", "alu bad code", "alu misaligned"])
def test_receiver_errors_stop_the_receiver(cl, case):
    send = Step(send_to=1, send=Region(0, 64))
    recv = Step(recv_from=0, recv=Region(256, 64), action=StepAction.REDUCE_LOCAL_FIRST)
    reduction = (ReduceOp.SUM.value, DType.INT32.value)
    if case == "length":
        recv = Step(recv_from=0, recv=Region(256, 32))
    elif case == "alu missing":
        reduction = (ReduceOp.PROD.value, DType.FLOAT64.value)     # left out of this build
    elif case == "alu bad code":
        reduction = (15, DType.INT32.value)
    else:
        reduction = (ReduceOp.SUM.value, DType.INT64.value)
        send = Step(send_to=1, send=Region(0, 60))
        recv = Step(recv_from=0, recv=Region(260, 60), action=StepAction.REDUCE_LOCAL_FIRST)
    a, b = _exchange_with_error(cl, send, recv, reduction)
    expected = "length" if case == "length" else "alu"
    assert b.engine.errors() == {expected}
    status = b.engine.status()
    assert status.error and not status.busy and not status.done and status.step == 0
    assert a.engine.status().done and a.engine.errors() == frozenset()
    assert b.mem_read(256, 64) == b"\x11" * 64          # nothing written
    with pytest.raises(NicollError, match=rf"engine of node 1 reports {expected}: {expected} \("):
        b.engine.check()


def test_a_tag_mismatch_is_a_protocol_error_at_the_sender(cl):
    a, b = _exchange_with_error(cl, Step(send_to=1, send=Region(0, 64), send_tag=1),
                                Step(recv_from=0, recv=Region(256, 64), recv_tag=2))
    assert a.engine.errors() == {"protocol"}
    assert b.engine.status().busy and b.engine.errors() == frozenset()


def test_counters(cl):
    a, b = cl.device(0), cl.device(1)
    a.mem_write(0, np.arange(25, dtype=np.int32))
    b.regs.engine.REDUCTION.write_fields(op=ReduceOp.SUM.value, dtype=DType.INT32.value)
    # 100 bytes in packets of one 32-byte beat: 4 data packets.  The receiver reduces them
    # into bytes 20 .. 120, which touch rows 0 .. 3.
    a.engine.push({**a.engine.command(Step(send_to=1, send=Region(0, 100)), 4), "packet_beats": 1})
    _push(b, Step(recv_from=0, recv=Region(20, 100), action=StepAction.REDUCE_RECEIVED_FIRST))
    # Back: a strided region, 3 runs of 8 bytes 40 apart (rows 0, 1, 2 of 32 bytes: runs at
    # 0 .. 8, 40 .. 48, 80 .. 88), copied: no ALU beats.  One packet of the default size.
    _push(b, Step(send_to=0, send=Region(0, 24, 8, 40)))
    _push(a, Step(recv_from=1, recv=Region(512, 24)))
    a.engine.go()
    b.engine.go()
    _wait_done(cl, (0, 1))
    assert a.engine.counters() == dict(bytes_sent=100, bytes_received=24,
                                       packets_sent=4 + 1, packets_received=1 + 1,
                                       alu_beats=0, busy_cycles=0, stall_cycles=0)
    assert b.engine.counters() == dict(bytes_sent=24, bytes_received=100,
                                       packets_sent=1 + 1, packets_received=4 + 1,
                                       alu_beats=4, busy_cycles=0, stall_cycles=0)
    # A strided reduction counts one row per row each run touches.
    for dev in (a, b):
        dev.engine.clear()
    b.regs.engine.REDUCTION.write_fields(op=ReduceOp.SUM.value, dtype=DType.INT32.value)
    _push(a, Step(send_to=1, send=Region(0, 48)))
    _push(b, Step(recv_from=0, recv=Region(24, 48, 16, 32), action=StepAction.REDUCE_LOCAL_FIRST))
    a.engine.go()
    b.engine.go()
    _wait_done(cl, (0, 1))
    # runs 24 .. 40 (rows 0, 1), 56 .. 72 (rows 1, 2), 88 .. 104 (rows 2, 3)
    assert b.engine.counters()["alu_beats"] == 6
    # A start clears the counters.
    b.engine.go()
    assert b.engine.status().busy and set(b.engine.counters().values()) == {0, 1}


def test_a_message_to_itself_is_a_local_copy(cl):
    dev = cl.device(2)
    dev.mem_write(0, bytes(range(48)))
    _push(dev, Step(send_to=2, send=Region(0, 48, 16, 32), recv_from=2, recv=Region(200, 48)))
    dev.engine.go()
    assert dev.engine.status().done
    # Runs 0 .. 16, 32 .. 48 and 64 .. 80 (zeros) land back to back.
    assert dev.mem_read(200, 48) == bytes(range(16)) + bytes(range(32, 48)) + bytes(16)
    assert dev.engine.counters()["bytes_sent"] == dev.engine.counters()["bytes_received"] == 48


def test_barrier_commands_wait_for_every_node(cl):
    cl.configure_barrier()
    seq = cl.device(0).barrier.status().seq
    for dev in cl.devices:
        _push(dev, Step(barrier=True))
    cl.device(0).engine.go()
    cl.device(1).engine.go()
    assert cl.device(0).engine.status().busy and cl.device(1).engine.status().busy
    cl.device(2).engine.go()
    _wait_done(cl, range(3))
    assert [dev.barrier.status().seq for dev in cl.devices] == [seq + 1] * 3
    cl.configure_barrier()          # leave barrier 0 to the other tests


def test_load_reports_a_refusal_of_its_last_step(any_cluster):
    """A schedule for more nodes than the build has: its last step names a peer past
    MAX_NODES, which only the engine's push check refuses.  load raises with the bit on
    every backend (on the gateware the verdict comes cycles after the push: load waits
    for it, where a read at once found no bit)."""
    dev = any_cluster.device(0)
    nodes = dev.max_nodes + 1
    steps = [Step(send_to=0, send=Region(0, 32), recv_from=0, recv=Region(32, 32)),
             Step(send_to=nodes - 1, send=Region(0, 32))]
    schedule = Schedule(rank=0, nodes=nodes, itemsize=4, buffer_bytes=64, steps=steps)
    with pytest.raises(NicollError, match=r"engine of node 0 reports peer"):
        dev.engine.load(schedule)
    assert dev.engine.status().queued == 1
    dev.engine.clear()


def test_load_checks_before_it_pushes(cl):
    from nicoll import schedule as sc
    dev = cl.device(0)
    _push(dev, GOOD)
    long = Schedule(rank=0, nodes=1, itemsize=4, buffer_bytes=64,
                    steps=[Step(send_to=0, send=Region(0, 32), recv_from=0, recv=Region(32, 32))]
                    * (dev.engine.depth + 1))
    with pytest.raises(NicollError, match=rf"rank 0's schedule has {dev.engine.depth + 1} steps; "
                                          rf"the engine's queue holds {dev.engine.depth}"):
        dev.engine.load(long)
    plan = sc.allreduce(3, 8, "float32", "sum", "ring")
    with pytest.raises(NicollError, match=r"the schedule is rank 1's; this is node 0"):
        dev.engine.load(plan.schedules[1], "sum", "float32")
    with pytest.raises(NicollError, match=r"the schedule reduces: give both op and dtype"):
        dev.engine.load(plan.schedules[0])
    with pytest.raises(NicollError, match=r"dtype int16 has 2-byte elements; the schedule has "
                                          r"4-byte ones"):
        dev.engine.load(plan.schedules[0], "sum", "int16")
    big = Schedule(rank=0, nodes=1, itemsize=4, buffer_bytes=MEM_SIZE + 4,
                   load=[Piece(0, 0, 4)])
    with pytest.raises(NicollError, match=rf"needs a {MEM_SIZE + 4}-byte buffer; device memory "
                                          rf"holds {MEM_SIZE} bytes"):
        dev.engine.load(big)
    assert dev.engine.status().queued == 1          # nothing was pushed or cleared
    dev.engine.load(plan.schedules[0], "sum", "float32")
    assert dev.engine.status().queued == len(plan.schedules[0].steps)
    fields = dev.regs.engine.REDUCTION.read_fields()
    assert (fields["op"], fields["dtype"]) == (ReduceOp.SUM.value, DType.FLOAT32.value)
