"""The engine's push-time refusals through the driver and registers: one table of bad
commands, each refused with its ERRORS bits and not queued on every backend (the gateware's
push checks and the model's, through the same driver and registers); halves a command does
not have are not checked, a strided region past the end is queued and stops its run, a full
queue refuses, and ``load`` reports a refusal of its last step and checks before it pushes.
"""

import numpy as np
import pytest

import nicoll
from nicoll import NicollError
from nicoll.hw.engine import COMMAND_LAYOUT, COMMAND_WORDS
from nicoll.hw.ops import DType, ReduceOp
from nicoll.schedule import Piece, Region, Schedule, Step

from conftest import NODES, cluster_kwargs

from engine_driver_helpers import (MEM_SIZE, MAX_NODES, command_value, push_step, push_words, GOOD,
                                   good_with)


def _action_3(data_width=256):
    words = good_with(data_width)
    value = command_value(words) | 3 << COMMAND_LAYOUT["action"].offset
    return [(value >> (32 * k)) & 0xFFFF_FFFF for k in range(COMMAND_WORDS)]


def _aggregate(send_tag, data_width=256):
    """An aggregate command that passes every check but its group count's (seed 003)."""
    return good_with(data_width, aggregate=1, send={"length": 4 * 64, "run": 0, "stride": 64},
                     recv={"length": 4 * 64, "run": 0, "stride": 64}, send_tag=send_tag)


def refusals(dev):
    """``{case: (command words, the ERRORS bits a push of it sets)}`` for ``dev``'s build (its
    memory, MAX_NODES and data width)."""
    mem, nodes, width = dev.mem_size, dev.max_nodes, dev.data_width

    def bad(**changes):
        return good_with(width, **changes)

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
    push_step(dev, GOOD)
    push_words(dev, words)
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
    push_step(dev, Step(send_to=0, recv_from=0, **regions), itemsize=1)
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
    push_words(dev, _aggregate(send_tag=MAX_NODES))
    assert dev.engine.errors() == frozenset()
    assert dev.engine.status().queued == 1


def test_halves_a_command_does_not_have_are_not_checked(cl):
    dev = cl.device(0)
    push_words(dev, good_with(has_send=0, send_to=MAX_NODES, send={"offset": MEM_SIZE}))
    assert dev.engine.errors() == frozenset()
    assert dev.engine.status().queued == 1


def test_a_full_queue_refuses(cl):
    dev = cl.device(0)
    words = good_with()
    for _ in range(dev.engine.depth):
        push_words(dev, words)
    assert dev.engine.errors() == frozenset()
    push_words(dev, words)
    assert dev.engine.errors() == {"queue_full"}
    assert dev.engine.status().queued == dev.engine.depth


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
    push_step(dev, GOOD)
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
