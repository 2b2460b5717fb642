"""The model engine's register-level behaviour (nicoll.model.engine), reached only through
Device and its registers: build parameters, push while running, clear, go, arm at a cycle,
the rendezvous, reductions by action and reduction register, device-side errors, barrier
commands and the counters.
"""

import numpy as np
import pytest

from nicoll import NicollError
from nicoll.driver import engine as eng
from nicoll.model.engine import MODEL_ALU_LATENCY
from nicoll.hw.engine import DEFAULT_PACKET_BEATS, DEFAULT_QUEUE_DEPTH, StepAction
from nicoll.hw.ops import DType, ReduceOp
from nicoll.ops import combine
from nicoll.schedule import Region, Step

from engine_driver_helpers import MAX_NODES, push_step, push_words, wait_done, GOOD, good_with


def test_build_parameters(cl):
    engine = cl.device(0).engine
    assert engine.depth == DEFAULT_QUEUE_DEPTH
    assert engine.packet_beats == DEFAULT_PACKET_BEATS
    assert engine.alu_latency == MODEL_ALU_LATENCY
    assert engine.status() == eng.EngineStatus(queued=0, armed=False, busy=False, done=False,
                                               error=False, step=0)
    assert set(engine.counters()) == {name.lower() for name in eng.COUNTER_NAMES}


def test_push_while_running_refuses_and_clear_stops(cl):
    dev = cl.device(0)
    push_step(dev, Step(recv_from=1, recv=Region(0, 32)))      # node 1 never sends
    dev.engine.go()
    assert dev.engine.status().busy
    push_step(dev, GOOD)
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
    push_step(dev, Step(send_to=0, send=Region(0, 32), recv_from=0, recv=Region(32, 32)))
    push_words(dev, good_with(send_to=MAX_NODES))
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
    push_step(dev, Step(send_to=0, send=Region(0, 32), recv_from=0, recv=Region(32, 32)))
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
    push_step(a, Step(send_to=1, send=Region(0, 64), send_tag=4))
    push_step(b, Step(recv_from=0, recv=Region(128, 64), recv_tag=4))
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
        wait_done(cl, range(3))
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
        push_step(a, Step(send_to=1, send=Region(0, 12)))
        push_step(b, Step(recv_from=0, recv=Region(64, 12), action=action))
        a.engine.go()
        b.engine.go()
        wait_done(cl, (0, 1))
        want = combine("sum", first, second)
        assert b.mem_read(64, 12) == want.tobytes()
    # The element type is the register's: the same bytes as int16 pairs.
    for dev in (a, b):
        dev.engine.clear()
    a.mem_write(0, np.array([1, 2], np.int16))
    b.mem_write(64, np.array([3, 4], np.int16))
    b.regs.engine.REDUCTION.write_fields(op=ReduceOp.BXOR.value, dtype=DType.INT16.value)
    push_step(a, Step(send_to=1, send=Region(0, 4)), itemsize=2)
    push_step(b, Step(recv_from=0, recv=Region(64, 4), action=StepAction.REDUCE_LOCAL_FIRST), itemsize=2)
    a.engine.go()
    b.engine.go()
    wait_done(cl, (0, 1))
    assert np.frombuffer(b.mem_read(64, 4), np.int16).tolist() == [3 ^ 1, 4 ^ 2]


def _exchange_with_error(cl, send_step, recv_step, reduction=None):
    a, b = cl.device(0), cl.device(1)
    b.mem_write(256, b"\x11" * 64)
    if reduction:
        b.regs.engine.REDUCTION.write_fields(op=reduction[0], dtype=reduction[1])
    push_step(a, send_step)
    push_step(b, recv_step)
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
    if case == "length":
        # The receiver took no packet of the message, so no ACK comes: the sender waits
        # (docs/faults.md, "Packet-level recovery"), until the host clears it.
        assert a.engine.status().busy and not a.engine.status().done
    else:
        assert a.engine.status().done
    assert a.engine.errors() == frozenset()
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
    push_step(b, Step(recv_from=0, recv=Region(20, 100), action=StepAction.REDUCE_RECEIVED_FIRST))
    # Back: a strided region, 3 runs of 8 bytes 40 apart (rows 0, 1, 2 of 32 bytes: runs at
    # 0 .. 8, 40 .. 48, 80 .. 88), copied: no ALU beats.  One packet of the default size.
    push_step(b, Step(send_to=0, send=Region(0, 24, 8, 40)))
    push_step(a, Step(recv_from=1, recv=Region(512, 24)))
    a.engine.go()
    b.engine.go()
    wait_done(cl, (0, 1))
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
    push_step(a, Step(send_to=1, send=Region(0, 48)))
    push_step(b, Step(recv_from=0, recv=Region(24, 48, 16, 32), action=StepAction.REDUCE_LOCAL_FIRST))
    a.engine.go()
    b.engine.go()
    wait_done(cl, (0, 1))
    # runs 24 .. 40 (rows 0, 1), 56 .. 72 (rows 1, 2), 88 .. 104 (rows 2, 3)
    assert b.engine.counters()["alu_beats"] == 6
    # A start clears the counters.
    b.engine.go()
    assert b.engine.status().busy and set(b.engine.counters().values()) == {0, 1}


def test_a_message_to_itself_is_a_local_copy(cl):
    dev = cl.device(2)
    dev.mem_write(0, bytes(range(48)))
    push_step(dev, Step(send_to=2, send=Region(0, 48, 16, 32), recv_from=2, recv=Region(200, 48)))
    dev.engine.go()
    assert dev.engine.status().done
    # Runs 0 .. 16, 32 .. 48 and 64 .. 80 (zeros) land back to back.
    assert dev.mem_read(200, 48) == bytes(range(16)) + bytes(range(32, 48)) + bytes(16)
    assert dev.engine.counters()["bytes_sent"] == dev.engine.counters()["bytes_received"] == 48


def test_barrier_commands_wait_for_every_node(cl):
    cl.configure_barrier()
    seq = cl.device(0).barrier.status().seq
    for dev in cl.devices:
        push_step(dev, Step(barrier=True))
    cl.device(0).engine.go()
    cl.device(1).engine.go()
    assert cl.device(0).engine.status().busy and cl.device(1).engine.status().busy
    cl.device(2).engine.go()
    wait_done(cl, range(3))
    assert [dev.barrier.status().seq for dev in cl.devices] == [seq + 1] * 3
    cl.configure_barrier()          # leave barrier 0 to the other tests
