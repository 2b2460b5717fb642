# amaranth: UnusedElaboratable=no
"""BarrierUnit and BarrierTreeTop as built: constructor errors, ports, the notice layout, the
tree tables, elaboration at 64 nodes, the tree top's Verilog (one unit module) and one
barrier on the tree top of the Verilator bench (tests/test_barrier_cocotb.py) in the Amaranth
simulator.  Ref: seed 004.
"""

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Fragment, Value

from nicoll.errors import NicollError
from nicoll.hw.barrier import (AcSubMode, BarrierMode, BarrierUnit, BARRIER_ERROR_LAYOUT,
                               NOTICE_LAYOUT, BarrierNoticeKind, notice_stream, tree_tables)
from nicoll.hw.sim.barrier_tree import BarrierTreeTop
from nicoll.hw.sim.barrier_tree_verilog import barrier_tree_verilog
from nicoll.sim.testbench import run_testbenches
from nicoll.hw.tree import BarrierTree

from hw_barrier_helpers import UNIT, DONE_ACT


def test_constructor_errors():
    with pytest.raises(TypeError, match=r"^max_nodes must be an integer, not '8'$"):
        BarrierUnit("8", 2)
    with pytest.raises(ValueError, match=r"^max_nodes must be between 1 and 4096, not 0$"):
        BarrierUnit(0, 2)
    with pytest.raises(ValueError, match=r"^max_nodes must be between 1 and 4096, not 5000$"):
        BarrierUnit(5000, 2)
    with pytest.raises(TypeError, match=r"^max_children must be an integer, not True$"):
        BarrierUnit(8, True)
    with pytest.raises(ValueError, match=r"^max_children must be between 1 and 64, not 0$"):
        BarrierUnit(8, 0)
    with pytest.raises(TypeError, match=r"^log_depth must be an integer, not 16.0$"):
        BarrierUnit(8, 2, log_depth=16.0)
    with pytest.raises(ValueError, match=r"^log_depth must be a power of two between 16 and "
                                         r"1024, not 24$"):
        BarrierUnit(8, 2, log_depth=24)
    with pytest.raises(ValueError, match=r"^log_depth must be a power of two between 16 and "
                                         r"1024, not 8$"):
        BarrierUnit(8, 2, log_depth=8)
    with pytest.raises(TypeError, match=r"^dst_checked must be a bool, not 1$"):
        BarrierUnit(8, 2, dst_checked=1)
    # The port for the sender's compare exists only when the sender makes it.
    for name in ("rx_to_me", "rx_from_parent", "rx_from_child"):
        assert name not in BarrierUnit(8, 2).signature.members
        assert BarrierUnit(8, 2, dst_checked=True).signature.members[name].flow.name == "In"


def test_ports():
    dut = BarrierUnit(16, 3, log_depth=32)
    members = dut.signature.members
    assert (dut.max_nodes, dut.max_children, dut.log_depth, dut.route_width) == (16, 3, 32, 2)
    assert members["tx"].flow.name == "Out" and members["rx"].flow.name == "In"
    assert members["tx"].signature == notice_stream()
    widths = {"now": 64, "node_id": 16, "parent_id": 16, "has_parent": 1, "child_valid": 3,
              "route_we": 1, "route_clear": 1, "route_addr": 16, "route_data": 2, "route_rdata": 2, "m": 16,
              "c": 64, "estimate": 64, "start": 1, "start_seq": 16, "done": 1, "done_seq": 16,
              "seq": 16, "finished": 1, "released": 1, "released_at": 64, "aborted": 1,
              "abort_seq": 16, "abort_estimate": 64, "vector": 16, "ones": 16, "total": 16,
              "s": 64, "mt": 64, "e": 64, "stamp_valid": 3, "stamp_seq": 16,
              "release_ones": 16, "stale": 32, "errors": 12, "error": 1, "log_index": 5,
              "log_seq": 16, "log_ids": 16, "log_count": 16, "log_overflow": 1}
    for name, width in widths.items():
        assert len(Value.cast(getattr(dut, name))) == width, name
    assert len(Value.cast(dut.child_id)) == 3 * 16
    assert len(Value.cast(dut.tx.payload)) == NOTICE_LAYOUT.size
    for name in ("tx", "route_rdata", "seq", "errors", "log_ids"):
        assert members[name].flow.name == "Out", name
    for name in ("rx", "node_id", "route_we", "mode", "ac_sub", "done", "log_index"):
        assert members[name].flow.name == "In", name


def test_notice_layout():
    # One flat struct that fits a packet header (<= 192 bits).
    assert NOTICE_LAYOUT.size == 2 + 16 * 4 + 64 <= 192
    assert list(dict(NOTICE_LAYOUT)) == ["kind", "seq", "src", "dst", "subject", "estimate"]
    assert [k.value for k in BarrierNoticeKind] == [0, 1, 2]
    assert [k.value for k in BarrierMode] == [0, 1, 2]
    assert [k.value for k in AcSubMode] == [1, 2, 3]
    # The host packs a notice with the same layout.
    value = NOTICE_LAYOUT.const({"kind": BarrierNoticeKind.KILL, "seq": 5, "src": 1, "dst": 3,
                                 "subject": 0, "estimate": 42}).as_value().value
    assert value & 3 == BarrierNoticeKind.KILL.value and (value >> 2) & 0xffff == 5
    assert value >> 66 == 42
    assert BARRIER_ERROR_LAYOUT.size == 12


def test_tree_tables():
    # The shapes and the tree checks are nicoll.hw.tree.BarrierTree's; tree_tables adds the
    # unit's route encoding (slot + 1) and the child-slot limit.
    t = tree_tables(BarrierTree.binary(7), 2)
    assert t[0] == {"parent": None, "children": [1, 2], "depth": 0,
                    "routes": {1: 1, 3: 1, 4: 1, 2: 2, 5: 2, 6: 2}}
    assert t[5] == {"parent": 2, "children": [], "routes": {}, "depth": 2}
    assert tree_tables([None, 0, 0, 0, 1], 3) == tree_tables(BarrierTree.kary(5, 3), 3)
    assert [x["parent"] for x in tree_tables(BarrierTree.chain(4), 1)] == [None, 0, 1, 2]
    for parents, match in (([None, None], r"exactly one root"), ([1, 0], r"exactly one root"),
                           ([None, 0, 3, 2], r"cycle"), ([None, 1], r"own parent"),
                           ([], r"at least one node")):
        with pytest.raises(NicollError, match=match):
            tree_tables(parents, 2)
    with pytest.raises(ValueError, match=r"^node 0 has 3 children, more than max_children = 2$"):
        tree_tables([None, 0, 0, 0], 2)
    with pytest.raises(TypeError, match=r"^max_children must be an integer, not '2'$"):
        tree_tables(BarrierTree.binary(3), "2")


def test_elaborates_at_64_nodes():
    # max_nodes = 64 (the minimum) elaborates to a netlist; simulation stays small.
    text = rtlil.convert(BarrierUnit(64, 2), name="barrier64")
    assert "module" in text
    Fragment.get(BarrierUnit(64, 8, log_depth=64), None)


# ---- BarrierTreeTop: the standalone tree of the Verilator bench (tests/test_barrier_cocotb.py)

def test_tree_top_constructor_errors():
    with pytest.raises(TypeError, match=r"^units must be an integer, not '8'$"):
        BarrierTreeTop("8")
    with pytest.raises(ValueError, match=r"^units must be between 1 and 256, not 0$"):
        BarrierTreeTop(0)
    with pytest.raises(ValueError, match=r"^max_children must be between 1 and 64, not 0$"):
        BarrierTreeTop(4, max_children=0)
    with pytest.raises(ValueError, match=r"^max_nodes must be between 4 and 4096, not 2$"):
        BarrierTreeTop(4, max_nodes=2)
    with pytest.raises(TypeError, match=r"^latency must be an integer, not 1\.0$"):
        BarrierTreeTop(4, latency=1.0)
    with pytest.raises(ValueError, match=r"^latency must be between 0 and 16, not 17$"):
        BarrierTreeTop(4, latency=17)
    with pytest.raises(ValueError, match=r"^a full crossbar joins at most 32 units, not 33; "
                                         r"pass links=BarrierTree\(\.\.\.\)$"):
        BarrierTreeTop(33)
    with pytest.raises(TypeError, match=r"^links must be None or a BarrierTree, not "
                                        r"\[None, 0\]$"):
        BarrierTreeTop(2, links=[None, 0])
    with pytest.raises(ValueError, match=r"^links must be a tree of 4 nodes, not "
                                         r"BarrierTree\(\[None, 0, 0\]\)$"):
        BarrierTreeTop(4, links=BarrierTree.binary(3))
    with pytest.raises(ValueError, match=r"^links has a node with 3 children, more than "
                                         r"max_children = 2$"):
        BarrierTreeTop(4, links=BarrierTree.kary(4, 3))
    with pytest.raises(TypeError, match=r"^unit_module must be None or a module name, not 1$"):
        BarrierTreeTop(4, unit_module=1)
    with pytest.raises(ValueError, match=r"^log_depth must be a power of two between 16 and "
                                         r"1024, not 20$"):
        BarrierTreeTop(4, log_depth=20)
    with pytest.raises(TypeError, match=r"^log_depth must be an integer, not '16'$"):
        BarrierTreeTop(4, log_depth="16")


def test_tree_top_ports():
    top = BarrierTreeTop(3, max_children=2, max_nodes=5, latency=2)
    assert (top.n_units, top.max_children, top.max_nodes, top.latency, top.links,
            top.log_depth) == (3, 2, 5, 2, None, 16)
    widths = {"now": 64, "node_id": 48, "parent_id": 48, "has_parent": 3, "child_id": 96,
              "child_valid": 6, "route_we": 3, "route_addr": 48, "route_data": 6,
              "route_rdata": 6, "done": 3, "at_a": 192, "seq_b": 48, "inject": NOTICE_LAYOUT.size,
              "down_count": 3 * 4 * 32, "up_count": 3 * 4 * 32, "misrouted": 32,
              "released_at": 192, "errors": 36, "stamp_valid": 9, "log_ids": 15, "stale": 96,
              "watch_mask": 3, "watch_all": 1, "busy": 1, "clash": 16}
    for name, width in widths.items():
        assert len(Value.cast(getattr(top, name))) == width, name
    assert [top.targets(s) for s in range(3)] == [[1, 2], [0, 2], [0, 1]]
    chain = BarrierTreeTop(3, max_children=1, links=BarrierTree.chain(3))
    assert [chain.targets(s) for s in range(3)] == [[1], [0, 2], [1]]
    Fragment.get(top, None)
    Fragment.get(chain, None)


def test_tree_top_verilog_has_one_unit_module():
    text = barrier_tree_verilog(3, max_children=1, links=BarrierTree.chain(3), latency=0)
    assert text.count("module nicoll_barrier_unit(") == 1
    assert text.count("module nicoll_barrier_tree(") == 1
    assert text.count("nicoll_barrier_unit unit") == 3


def test_tree_top_runs_a_barrier():
    """A chain 0 <- 1 <- 2 with L = 2 (hop 5) in the Amaranth simulator: timed dones, the
    release cycles of the documented formula, link counters, a misrouted notice."""
    top = BarrierTreeTop(3, max_children=1, latency=2, links=BarrierTree.chain(3))
    hop = 2 + UNIT
    out = {}

    async def tb(ctx):
        await ctx.tick()                # the top's registered reset
        ctx.set(top.node_id, [0, 1, 2])
        ctx.set(top.parent_id, [0, 0, 1])
        ctx.set(top.has_parent, 0b110)
        ctx.set(top.child_id, [[1], [2], [0]])
        ctx.set(top.child_valid, [1, 1, 0])
        for step, writes in enumerate(([(1, 1), (2, 1), None], [(2, 1), None, None])):
            ctx.set(top.route_we, sum(1 << i for i, w in enumerate(writes) if w))
            ctx.set(top.route_addr, [w[0] if w else 0 for w in writes])
            ctx.set(top.route_data, [w[1] if w else 0 for w in writes])
            await ctx.tick()
        ctx.set(top.route_we, 0)
        ctx.set(top.start, 1)
        await ctx.tick()
        ctx.set(top.start, 0)
        await ctx.tick().repeat(2)
        now = ctx.get(top.now)
        at = [now + 5, now + 3, now + 40]
        ctx.set(top.at_a, at)
        ctx.set(top.seq_a, [0, 0, 0])
        ctx.set(top.watch_mask, 0b111)
        ctx.set(top.watch_seq, 1)
        await ctx.tick().until(top.watch_all)
        out["at"] = at
        out["released_at"] = list(ctx.get(top.released_at))
        out["down"] = [list(x) for x in ctx.get(top.down_count)]
        out["up"] = [list(x) for x in ctx.get(top.up_count)]
        # Unit 2 told that its parent is 0, which it has no link to: its next completion is
        # dropped by the network and counted.
        ctx.set(top.parent_id, [0, 0, 0])
        ctx.set(top.at_a, [0, 0, ctx.get(top.now) + 3])
        ctx.set(top.seq_a, [0, 0, 1])
        await ctx.tick().repeat(12)
        out["misrouted"] = ctx.get(top.misrouted)
        out["busy"] = ctx.get(top.busy)

    run_testbenches(top, tb, watchdog_cycles=2000)
    root_release = out["at"][2] + DONE_ACT + 2 * hop + 1    # done acts DONE_ACT later
    assert out["released_at"] == [root_release, root_release + hop, root_release + 2 * hop]
    R, C, K = BarrierNoticeKind.RELEASE.value, BarrierNoticeKind.COMPLETE.value, BarrierNoticeKind.KILL.value
    assert out["down"][0] == [0, 0, 0, 0]
    assert out["down"][1][R] == out["down"][2][R] == 1 and out["down"][1][K] == 0
    assert out["up"][2][C] == 1 and out["up"][1][C] == 2 and out["up"][0] == [0, 0, 0, 0]
    assert out["misrouted"] == 1 and out["busy"] == 0
