# amaranth: UnusedElaboratable=no
"""Engine: the checks a command meets when it is pushed (region, peer and command errors; a
full queue), and their agreement with the device model's push_refusals on random command
words: one set of rules for the gateware and the model (docs/engine.md).

The harness (node 0 sending to itself) and the memory model: hw_engine_helpers.
"""

import random

from amaranth.lib import data

import nicoll.driver.engine as eng
from nicoll.model.engine import push_refusals
from nicoll.hw.engine import COMMAND_LAYOUT, COMMAND_WORDS

from hw_engine_helpers import (MEM_SIZE, BEAT, MAX_NODES, QUEUE_DEPTH, PACKET_BEATS, LOCAL_FIRST,
                               RECEIVED_FIRST, simulate, region, command, Model, random_image,
                               errors, memory, pulse, push, clear, wait_stopped, settle,
                               run_schedule)


def raw_command(fields, **raw):
    """A command with some fields set to values the layout's enums cannot name."""
    bits = COMMAND_LAYOUT.const(fields).as_value().value
    for name, value in raw.items():
        field = COMMAND_LAYOUT[name]
        bits = bits & ~(((1 << field.width) - 1) << field.offset) | value << field.offset
    return data.Const(COMMAND_LAYOUT, bits)


GOOD = command(send=region(0, 16), recv=region(512, 16))

REFUSED = {
    "outside memory": ({"region"}, command(send=region(1020, 8), recv=region(512, 8))),
    "receive outside memory": ({"region"}, command(send=region(0, 8), recv=region(1017, 8))),
    "offset beyond memory": ({"region"}, command(send=region(0, 8), recv=region(1 << 20, 8))),
    # Fields past the walkers' count bits: the checks' narrow sums alone would see 8.
    "length beyond memory": ({"region"}, command(send=region(0, 8 + (1 << 16)),
                                                 recv=region(512, 8))),
    "end past 2**32": ({"region"}, command(send=region(0, 8),
                                           recv=region(0xFFFF_FFF8, 0x10))),
    "zero length": ({"region"}, command(send=region(0, 0), recv=region(512, 0))),
    "run longer than stride": ({"region"},
                               command(send=region(0, 16, 8, 4), recv=region(512, 16))),
    "send peer": ({"peer"}, command(send=region(0, 8), recv=region(512, 8), send_to=4)),
    "receive peer": ({"peer"}, command(send=region(0, 8), recv=region(512, 8),
                                       recv_from=0xffff)),
    "action 3": ({"command"}, raw_command(command(send=region(0, 8), recv=region(512, 8)),
                                          action=3)),
    "barrier with data": ({"command"}, command(send=region(0, 8), barrier=1)),
    "nothing to do": ({"command"}, command()),
    "reduce without receive": ({"command"}, command(send=region(0, 8), action=LOCAL_FIRST)),
    "packet too long": ({"command"}, command(send=region(0, 8), recv=region(512, 8),
                                             packet_beats=PACKET_BEATS + 1)),
    # An aggregate command (seed 003): slots of whole rows, more than one row each, no runs.
    "aggregate slot of one row": ({"command"}, command(send=region(0, 64, 0, 8),
                                                       recv=region(512, 64, 0, 16), aggregate=1)),
    "aggregate slot not whole rows": ({"command"}, command(send=region(0, 64, 0, 12),
                                                           recv=region(512, 64, 0, 16),
                                                           aggregate=1)),
    "aggregate receive stride 0": ({"command"}, command(send=region(0, 64, 0, 16),
                                                        recv=region(512, 64), aggregate=1)),
    # More destination groups than nodes: the slot offset's product covers the group's
    # ceil(log2(max_nodes)) bits only (Engine._aggregate).
    "aggregate groups past max_nodes": ({"command"}, command(
        send=region(0, 64, 0, 16), recv=region(512, 64, 0, 16), aggregate=1,
        send_tag=MAX_NODES + 1)),
    "aggregate send run": ({"command"}, command(send=region(0, 64, 64, 16),
                                                recv=region(512, 64, 0, 16), aggregate=1)),
    "aggregate receive run": ({"command"}, command(send=region(0, 64, 0, 16),
                                                   recv=region(512, 64, 64, 16), aggregate=1)),
    "aggregate reducing": ({"command"}, command(send=region(0, 64, 0, 16),
                                               recv=region(512, 64, 0, 16), aggregate=1,
                                               action=LOCAL_FIRST)),
    "several at once": ({"region", "peer", "command"},
                        command(send=region(1020, 8), send_to=9, action=RECEIVED_FIRST)),
}


def test_pushes_in_consecutive_cycles_fill_the_queue_exactly():
    """Pushes strobed in every cycle, each with its checks in flight while the one before it
    is written: the queue takes QUEUE_DEPTH of them and refuses the next with
    ``queue_full`` (the write's decision is made a stage ahead, from the fullness the write
    before it leaves); a bad command among them is refused without taking a place."""
    image = random_image(random.Random("burst"))
    bad_at = 3                                  # the fourth push is refused

    async def main(ctx, dut):
        engine = dut.engine
        await clear(ctx, dut)
        cmds = [GOOD] * (QUEUE_DEPTH + 2)
        cmds[bad_at] = REFUSED["outside memory"][1]
        for cmd in cmds:
            ctx.set(engine.cmd, COMMAND_LAYOUT.const(cmd))
            ctx.set(engine.push, 1)
            await ctx.tick()
        ctx.set(engine.push, 0)
        await ctx.tick().repeat(4)
        assert ctx.get(engine.queued) == QUEUE_DEPTH
        assert errors(ctx, dut) == {"region", "queue_full"}

    simulate(image, main, seed=22)


def test_push_time_errors():
    """Each refused push sets its ERRORS bit and queues nothing; clear clears the bit; the
    queue takes QUEUE_DEPTH commands; a push while running is refused and stops the run."""
    image = random_image(random.Random(13))
    model = Model(image)

    async def main(ctx, dut):
        engine = dut.engine
        for name, (bits, cmd) in REFUSED.items():
            await clear(ctx, dut)
            assert await push(ctx, dut, GOOD) == set()
            assert await push(ctx, dut, cmd) == bits, name
            assert ctx.get(engine.queued) == 1, name
            await pulse(ctx, engine.go)     # an error blocks the start
            assert not ctx.get(engine.busy) and not ctx.get(engine.done), name

        # A barrier alone, a send alone and a reducing receive alone are accepted.
        await clear(ctx, dut)
        assert await push(ctx, dut, command(barrier=1)) == set()
        assert await push(ctx, dut, command(send=region(0, 8))) == set()
        assert await push(ctx, dut, command(recv=region(512, 8), action=LOCAL_FIRST)) == set()
        assert await push(ctx, dut, command(send=region(0, 64, 0, 16),
                                            recv=region(512, 64, 0, 16), aggregate=1,
                                            send_tag=MAX_NODES)) == set()
        assert ctx.get(engine.queued) == 4

        await clear(ctx, dut)
        for k in range(QUEUE_DEPTH):
            assert await push(ctx, dut, command(send=region(8 * k, 8), recv=region(512 + 8 * k, 8),
                                                tag=k)) == set()
        assert ctx.get(engine.queued) == QUEUE_DEPTH
        assert await push(ctx, dut, GOOD) == {"queue_full"}
        assert ctx.get(engine.queued) == QUEUE_DEPTH
        await clear(ctx, dut)

        # A full queue runs.
        cmds = [command(send=region(8 * k, 8), recv=region(512 + 8 * k, 8), tag=k)
                for k in range(QUEUE_DEPTH)]
        await run_schedule(ctx, dut, model, cmds)

        # Push while running.
        await clear(ctx, dut)
        assert await push(ctx, dut, command(send=region(0, 96), recv=region(600, 96))) == set()
        await pulse(ctx, engine.go)
        await ctx.tick()
        assert ctx.get(engine.busy)
        assert await push(ctx, dut, GOOD) == {"running"}
        assert ctx.get(engine.queued) == 1
        await wait_stopped(ctx, dut)
        assert not ctx.get(engine.busy) and not ctx.get(engine.done)
        await settle(ctx, dut)
        await clear(ctx, dut)
        model.mem[:] = memory(ctx, dut)     # the stopped copy may have written some rows
        await run_schedule(ctx, dut, model, [GOOD])

        # GO strobed right behind two pushes, while they are still in their checks: the
        # start waits for them and runs both.
        await clear(ctx, dut)
        for cmd in (GOOD, command(send=region(16, 8), recv=region(528, 8), tag=9)):
            ctx.set(engine.cmd, COMMAND_LAYOUT.const(cmd))
            await pulse(ctx, engine.push)
        await pulse(ctx, engine.go)
        await wait_stopped(ctx, dut)
        assert errors(ctx, dut) == set() and ctx.get(engine.done)
        assert ctx.get(engine.step) == 2 and ctx.get(engine.queued) == 2

    simulate(image, main, seed=5)


def random_command_word(rng):
    """Random COMMAND_LAYOUT bits (a data.Const) and the same command as the device model
    reads it from CMD0 .. CMD10 (nicoll.driver.engine.unpack): values drawn around every bound the
    push checks have (memory's end, the walkers' count bits, MAX_NODES, the packet's beats,
    the aggregate's row multiples), any action code, any flags."""
    beat = BEAT

    def count():
        return rng.choice([0, 1, rng.randrange(1, 3 * beat), rng.randrange(MEM_SIZE + 1),
                           MEM_SIZE - rng.randrange(2 * beat), MEM_SIZE, MEM_SIZE + 1,
                           (1 << 16) + rng.randrange(64), rng.randrange(1 << 32),
                           (1 << 32) - 1 - rng.randrange(64), beat * rng.randrange(1, 9)])

    def node():
        return rng.choice([0, 1, MAX_NODES - 1, MAX_NODES, MAX_NODES + 1, rng.randrange(1 << 16)])

    def inside():
        # A region within memory: contiguous, or strided with its run at most its stride
        # (its runs may still pass memory's end).
        offset = rng.randrange(MEM_SIZE)
        length = rng.randrange(1, MEM_SIZE - offset + 1)
        if rng.random() < 0.5:
            return {"offset": offset, "length": length, "run": 0, "stride": 0}
        run = rng.randrange(1, length + 1)
        return {"offset": offset, "length": length, "run": run,
                "stride": run + rng.randrange(3 * beat)}

    # A command the checks pass but for the draw, then 0 to 3 fields drawn from the edges.
    fields = {"send_to": rng.randrange(MAX_NODES), "recv_from": rng.randrange(MAX_NODES),
              "send_tag": rng.randrange(MAX_NODES + 1), "recv_tag": rng.randrange(1 << 16),
              "packet_beats": rng.randrange(PACKET_BEATS + 1), "action": rng.randrange(3),
              "has_send": 1, "has_recv": 1, "fence": rng.randrange(2), "barrier": 0,
              "aggregate": 0, "send": inside(), "recv": inside()}
    if fields["action"] != 0 or rng.random() < 0.3:
        fields[rng.choice(["has_send", "has_recv"])] = rng.randrange(2)
    if rng.random() < 0.15:             # an aggregate: slots of whole rows
        fields.update(aggregate=1, action=0, has_send=1, has_recv=1)
        for half in ("send", "recv"):
            fields[half].update(run=0, stride=beat * rng.randrange(2, 9))
    edges = {"send_to": node, "recv_from": node, "send_tag": node,
             "packet_beats": lambda: rng.choice([PACKET_BEATS + 1, rng.randrange(1 << 16)]),
             "action": lambda: rng.randrange(4),
             "has_send": lambda: rng.randrange(2), "has_recv": lambda: rng.randrange(2),
             "barrier": lambda: rng.randrange(2), "aggregate": lambda: rng.randrange(2)}
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
        name = rng.choice(list(edges) + ["send", "recv"])
        if name in edges:
            fields[name] = edges[name]()
        else:
            fields[name][rng.choice(["offset", "length", "run", "stride"])] = count()
    bits = 0
    for path, value in ((p, v) for p, v in _leaves(fields)):
        field = COMMAND_LAYOUT
        offset = 0
        for name in path:
            offset += field[name].offset
            field = field[name].shape
        bits |= value << offset
    words = [(bits >> (32 * k)) & 0xFFFF_FFFF for k in range(COMMAND_WORDS)]
    return data.Const(COMMAND_LAYOUT, bits), eng.unpack(words)


def _leaves(fields, prefix=()):
    for name, value in fields.items():
        if isinstance(value, dict):
            yield from _leaves(value, prefix + (name,))
        else:
            yield prefix + (name,), value


def test_push_checks_agree_with_the_device_model():
    """One set of rules: random command words pushed into the gateware refuse with exactly
    the ERRORS bits the device model's push check gives (nicoll.model.engine.push_refusals),
    and are queued exactly when it gives none.  Before the two were held together, the model
    refused a strided region whose runs pass memory's end (a product of fields) while the
    gateware, as the register map says, queues it and stops at its first row outside."""
    rng = random.Random("one set of rules")
    cases = [random_command_word(rng) for _ in range(600)]
    cases.append((COMMAND_LAYOUT.const(command(send=region(1000, 8, 4, 100),
                                               recv=region(512, 8))), None))
    seen = {}

    async def main(ctx, dut):
        for k, (cmd, fields) in enumerate(cases):
            if fields is None:
                fields = eng.unpack((cmd.as_value().value >> (32 * j)) & 0xFFFF_FFFF
                                    for j in range(COMMAND_WORDS))
            await clear(ctx, dut)
            got = await push(ctx, dut, cmd)
            want = push_refusals(fields, beat_bytes=BEAT, mem_size=MEM_SIZE,
                                 max_nodes=MAX_NODES, packet_beats=PACKET_BEATS)
            assert got == want, (k, fields)
            assert ctx.get(dut.engine.queued) == (0 if want else 1), (k, fields)
            key = frozenset(want)
            seen[key] = seen.get(key, 0) + 1

    simulate(bytes(MEM_SIZE), main, seed=31, cycles=20_000)
    # The draw reaches every outcome, so a rule either side dropped would show.
    assert {frozenset(), frozenset({"region"}), frozenset({"peer"}),
            frozenset({"command"})} <= set(seen), seen
    assert seen[frozenset()] >= 20, seen
