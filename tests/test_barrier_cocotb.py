"""cocotb + Verilator bench of trees of barrier units (sim/benches/barrier/bench.py), one build per
configuration, cached across runs.  Ref: seed 004.

Three builds of :class:`nicoll.hw.sim.barrier_tree.BarrierTreeTop`, links of L = 1 cycle (a tree
hop is 3 cycles):

- ``u8``: 8 units joined by a full crossbar, max_nodes 8, 4 child slots.  The bench programs
  any tree of up to 8 nodes into it, so one build runs N = 1, 2, 7, 8 as binary, 3-ary,
  4-ary and chain trees (depth 1 to 8).  This is the build of the default run.
- ``u16``: the same with 16 units and max_nodes 16: N = 15 as binary, 4-ary and chain trees.
  Its build takes about twice as long as ``u8``'s, so it runs when asked for
  (NICOLL_BARRIER_16=1); trees of 15 and 64 nodes are also simulated in the Amaranth tests
  of tests/test_hw_barrier_*.py.
- ``b64``: 64 units linked only along the binary tree (a crossbar of 64 would be 4096 links),
  max_nodes 64, 2 child slots.  Its Verilator build takes about 7 minutes on two cores, so it
  runs only when asked for (NICOLL_BARRIER_64=1), like the full 256-bit ALU.

Each run executes every test of the bench against one tree (see the bench's docstring for
what they check).  NICOLL_BARRIERS sets the consecutive-barrier count of every run (default:
300 on binary:8 and binary:15, 100 on binary:64, 200 elsewhere).  The measurements (release
latency, waiting saved by mode 1, consecutive-run statistics) print with ``-s``:

    .venv/bin/pytest -s tests/test_barrier_cocotb.py -k "binary8 or binary64"
"""

import json
import os

import pytest

from nicoll.hw.sim.barrier_tree_verilog import TOPLEVEL, barrier_tree_verilog
from nicoll.sim.benches.barrier.bench import parse_tree
from nicoll.sim.verilator_backend import build_design, run_bench
from nicoll.hw.tree import BarrierTree

pytestmark = pytest.mark.verilator

#: Build parameters; ``links``: None (crossbar) or the shape of the only linked tree.
BUILDS = {
    "u8": dict(units=8, max_children=4, max_nodes=8, latency=1, links=None, log_depth=16),
    "u16": dict(units=16, max_children=4, max_nodes=16, latency=1, links=None, log_depth=16),
    "b64": dict(units=64, max_children=2, max_nodes=64, latency=1, links="binary", log_depth=16),
}

#: cocotb tests in nicoll.sim.benches.barrier.
BENCH_TESTS = 11

#: C++ optimization of these builds, passed to Verilator's make through MAKEFLAGS (which
#: build_design keeps): the run-once code (constructors, the VPI symbol table that
#: --public-flat-rw fills with every signal) at -O0, the model at -O1.  At the default -Os the
#: symbol table of the 64-unit build alone takes over half an hour to compile on two cores
#: and the top's long functions four times longer than at -O1.
MAKE_OPT = "OPT_SLOW=-O0 OPT_FAST=-O1"

_ASK_16 = pytest.mark.skipif(not os.environ.get("NICOLL_BARRIER_16"),
                             reason="the 16-unit build takes about twice the 8-unit one's time; "
                                    "set NICOLL_BARRIER_16=1 to run it")
RUNS = [
    pytest.param("u8", "binary:1", 200, id="binary1"),
    pytest.param("u8", "chain:2", 200, id="chain2"),
    pytest.param("u8", "kary3:7", 200, id="3ary7"),
    pytest.param("u8", "binary:8", 300, id="binary8"),
    pytest.param("u8", "kary4:8", 200, id="4ary8"),
    pytest.param("u8", "chain:8", 200, id="chain8"),
    pytest.param("u16", "binary:15", 300, id="binary15", marks=_ASK_16),
    pytest.param("u16", "kary4:15", 200, id="4ary15", marks=_ASK_16),
    pytest.param("u16", "chain:15", 200, id="chain15", marks=_ASK_16),
    pytest.param("b64", "binary:64", 100, id="binary64", marks=pytest.mark.skipif(
        not os.environ.get("NICOLL_BARRIER_64"),
        reason="the 64-unit build takes ~7 minutes; set NICOLL_BARRIER_64=1 to run it")),
]


def build(name):
    params = dict(BUILDS[name])
    units = params.pop("units")
    shape = params.pop("links")
    links = BarrierTree.binary(units) if shape == "binary" else None
    key = ("barrier_tree", name, units, shape, tuple(sorted(params.items())), MAKE_OPT)
    saved = os.environ.get("MAKEFLAGS")
    os.environ["MAKEFLAGS"] = f"{saved or ''} {MAKE_OPT}".strip()
    try:
        return build_design(name=f"barrier_tree_{name}", key=key, toplevel=TOPLEVEL,
                            roots=("nicoll.hw.sim.barrier_tree_verilog",),
                            make_verilog=lambda: barrier_tree_verilog(units, links=links,
                                                                      **params))
    finally:
        if saved is None:
            del os.environ["MAKEFLAGS"]
        else:
            os.environ["MAKEFLAGS"] = saved


# Every run of a build on one xdist worker (``--dist loadgroup``): spread over two, the second
# would wait on the first one's build lock for the whole build.
@pytest.mark.xdist_group("barrier_tree")
@pytest.mark.parametrize("build_name, tree, barriers", RUNS)
def test_barrier_tree_bench(build_name, tree, barriers, tmp_path):
    params = BUILDS[build_name]
    assert len(parse_tree(tree)) <= params["units"]
    folder = build(build_name)
    results = tmp_path / "results.json"
    env = {"NICOLL_UNITS": str(params["units"]), "NICOLL_MAX_CHILDREN": str(params["max_children"]),
           "NICOLL_MAX_NODES": str(params["max_nodes"]), "NICOLL_LATENCY": str(params["latency"]),
           "NICOLL_LOG_DEPTH": str(params["log_depth"]), "NICOLL_TREE": tree,
           "NICOLL_SEED": str(sum(map(ord, tree))),
           "NICOLL_BARRIERS": os.environ.get("NICOLL_BARRIERS", str(barriers)),
           "NICOLL_RESULTS": str(results)}
    tests, failed = run_bench(folder, toplevel=TOPLEVEL, module="nicoll.sim.benches.barrier.bench",
                              test_dir=tmp_path, env=env)
    assert tests == BENCH_TESTS, f"expected the bench's {BENCH_TESTS} tests, results show {tests}"
    assert failed == 0, f"{failed} of {tests} bench tests failed; see {tmp_path / 'sim.log'}"
    measured = json.loads(results.read_text())
    latency = measured["latency"]
    print(f"\n{tree} ({build_name}): release seen {latency['worst']} cycles after the last done "
          f"(root {latency['root']}); 2*depth*hop = 2*{latency['height']}*{latency['hop']} = "
          f"{latency['bound']}")
    if "straggler" in measured:
        st = measured["straggler"]
        print(f"  one node {st['late']} cycles late: root releases at +{st['normal']['release']} "
              f"(mode 0), +{st['ac']['release']} (mode 1, m = N-1): {st['saved']} cycles saved; "
              f"mean wait of the others {st['normal']['mean_wait']:.1f} -> "
              f"{st['ac']['mean_wait']:.1f}")
    run = measured["consecutive"]
    print(f"  {run['barriers']} consecutive barriers in {run['cycles']} cycles: {run['early']} "
          f"early releases, {run['aborted']} aborts, {run['late']} late dones, "
          f"{run['stale']} stale strobes dropped")
