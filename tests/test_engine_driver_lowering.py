"""The engine's driver (nicoll.driver.engine): lowering a schedule step into a COMMAND_LAYOUT
command and packing it into CMD words, checked by unpacking with the layout itself; packet
counts of segmented steps, the driver's refusals, and names taken from the register map.
"""

import pytest
from amaranth.lib import data

from nicoll import NicollError
from nicoll.driver import engine as eng
from nicoll.hw.regmap.generated import REGMAP
from nicoll.hw.engine import COMMAND_LAYOUT, COMMAND_WORDS, DEFAULT_PACKET_BEATS, StepAction
from nicoll.schedule import Region, Step

from engine_driver_helpers import command_value, command_const


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
    c = data.Const(COMMAND_LAYOUT, command_value(words))
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
    assert command_const(fields).packet_beats == beats


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
