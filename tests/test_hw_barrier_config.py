# amaranth: UnusedElaboratable=no
"""BarrierUnit configuration (seed 004): bad tree configurations flagged in ERRORS, the route
table read back with its sizes, back-to-back route writes, and the route clear.

One unit (hw_barrier_helpers.Single) is driven directly from the testbench: its
configuration ports, ``rx`` notices and the host's done strobe.
"""

import random

import pytest

from nicoll.sim.testbench import run_testbenches

from hw_barrier_helpers import Single, setup_node, error_bits, GOOD


@pytest.mark.parametrize("change,bit", [
    ({}, None),
    ({"routes": {3: 1, 4: 2, 6: 3}}, "cfg_write"),       # entry > max_children
    ({"routes": {3: 1, 4: 2, 9: 1}}, "cfg_write"),       # address >= max_nodes
    ({"children": [3]}, "cfg_slot"),                      # 4 routed to slot 1, not valid
    ({"routes": {3: 1, 4: 2, 1: 1}}, "cfg_self"),        # own id routed to a child
    ({"children": [3, 1], "routes": {3: 1, 1: 2}}, "cfg_self"),
    ({"routes": {3: 1, 4: 2, 0: 2}}, "cfg_parent"),      # parent inside own subtree
    ({"parent": 1}, "cfg_parent"),
    ({"children": [3, 3], "routes": {3: 1}}, "cfg_dup"),
    ({"routes": {3: 1, 4: 1}}, "cfg_child"),             # child 4 not in its own slot
    ({"node": 9}, "cfg_id"),
    ({"children": [3, 12], "routes": {3: 1}}, "cfg_id"),
])
def test_config_errors(change, bit):
    dut = Single()
    u = dut.unit
    cfg = {**GOOD, **change}
    seen = {}

    async def tb(ctx):
        await setup_node(ctx, u, **cfg)
        await ctx.tick()
        seen["bits"] = error_bits(ctx, u)
        seen["total"] = ctx.get(u.total)
        await ctx.tick()                # the gate the checks make follows them a cycle later
        # A done with a bad tree sends nothing and sets nothing.
        ctx.set(u.done, 1)
        await ctx.tick()
        ctx.set(u.done, 0)
        sent = 0
        ctx.set(u.tx.ready, 1)
        for _ in range(6):
            sent += ctx.get(u.tx.valid)
            await ctx.tick()
        seen["sent"] = sent
        seen["finished"] = ctx.get(u.finished)

    run_testbenches(dut, tb)
    if bit is None:
        assert seen == {"bits": set(), "total": 3, "sent": 1, "finished": 1}
    else:
        assert bit in seen["bits"], seen
        assert seen["sent"] == 0 and seen["finished"] == 0
        if bit == "cfg_write":
            assert seen["bits"] == {"cfg_write"}


def test_route_readback_and_sizes():
    dut = Single(16, 3)
    u = dut.unit

    async def tb(ctx):
        await setup_node(ctx, u, node=0, parent=None, children=[1, 2, 3],
                         routes={1: 1, 2: 2, 3: 3, 4: 1, 5: 1, 6: 3})
        await ctx.tick()                # `total`'s second register stage
        assert ctx.get(u.total) == 7
        ctx.set(u.route_addr, 5)
        assert ctx.get(u.route_rdata) == 1
        # Moving an id between subtrees moves it between the counts; clearing removes it.
        ctx.set(u.route_we, 1)
        ctx.set(u.route_data, 2)
        await ctx.tick()
        ctx.set(u.route_addr, 6)
        ctx.set(u.route_data, 0)
        await ctx.tick()
        ctx.set(u.route_we, 0)
        await ctx.tick()
        await ctx.tick()
        await ctx.tick()                # a write lands two cycles later; `total` two more
        await ctx.tick()
        assert ctx.get(u.total) == 6
        ctx.set(u.route_addr, 5)
        assert ctx.get(u.route_rdata) == 2
        assert error_bits(ctx, u) == set()

    run_testbenches(dut, tb)


@pytest.mark.parametrize("seed", [1, 2])
def test_back_to_back_route_writes_keep_the_sizes(seed):
    """Route writes in consecutive cycles, to the same id and to ids that share a part of
    the table (the replaced entry is read in two register stages, the writes in flight
    forwarded): every slot's size and every entry read back equal a plain model's."""
    rng = random.Random(seed)
    dut = Single(16, 3)
    u = dut.unit
    table = [0] * 16
    seen = {}

    async def tb(ctx):
        await setup_node(ctx, u, node=0, parent=None, children=[1, 2, 3], routes={})
        for _ in range(12):
            burst = [(rng.choice([1, 2, 3, 5, 6, 7, 9]), rng.randrange(4))
                     for _ in range(rng.randrange(1, 7))]
            for addr, value in burst:
                ctx.set(u.route_we, 1)
                ctx.set(u.route_addr, addr)
                ctx.set(u.route_data, value)
                table[addr] = value
                await ctx.tick()
            ctx.set(u.route_we, 0)
            await ctx.tick().repeat(3)
        for slot in range(3):           # total = size of the valid slots + 1
            ctx.set(u.child_valid, 1 << slot)
            await ctx.tick().repeat(4)
            seen[slot] = ctx.get(u.total) - 1
        seen["table"] = []
        for addr in range(16):
            ctx.set(u.route_addr, addr)
            seen["table"].append(ctx.get(u.route_rdata))

    run_testbenches(dut, tb)
    assert seen["table"] == table
    assert [seen[slot] for slot in range(3)] == [table.count(slot + 1) for slot in range(3)]


def test_route_clear():
    dut = Single()
    u = dut.unit
    out = []

    async def tb(ctx):
        await setup_node(ctx, u, **{**GOOD, "routes": {3: 1, 4: 2, 5: 3}})
        out.append((error_bits(ctx, u), ctx.get(u.total)))
        ctx.set(u.route_clear, 1)
        await ctx.tick()
        ctx.set(u.route_clear, 0)
        ctx.set(u.child_valid, 0)
        for _ in range(5):              # the clear lands two cycles later; the routed-id
            await ctx.tick()            # vectors one more, the checks one more, `total` two
        out.append((error_bits(ctx, u), ctx.get(u.total)))

    run_testbenches(dut, tb)
    assert out == [({"cfg_write"}, 3), (set(), 1)]
