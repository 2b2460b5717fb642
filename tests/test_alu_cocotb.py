"""cocotb + Verilator bench of the ReductionALU (sim/benches/alu/bench.py), one build per configuration.

Default sample: NICOLL_ALU_VECTORS element pairs per (op, dtype) (default 1000, so the suite
stays quick).  The long run, at least 100 000 per pair:

    NICOLL_ALU_VECTORS=100000 .venv/bin/pytest tests/test_alu_cocotb.py

Configurations: every pair at data_width 64 (one lane: every unit once), and the integer and
compare ops but the products at 256 (four lanes: the 256-bit operand, result and FIFO words;
the eight integer products left out, so they must come back flagged).  The full ALU at 256
bits repeats the 64-bit lane four times but takes Verilator about ten minutes to build on two
cores, so it runs only when asked for: NICOLL_ALU_FULL_256=1.
"""

import os

import pytest

from nicoll.hw.alu import all_capabilities, alu_verilog
from nicoll.hw.ops import ReduceOp
from nicoll.sim.benches.alu.bench import format_pairs
from nicoll.sim.verilator_backend import build_design, run_bench

pytestmark = pytest.mark.verilator

INTEGER_AND_COMPARE = frozenset(p for p in all_capabilities()
                                if not p[1].is_float or p[0] in (ReduceOp.MIN, ReduceOp.MAX))
FULL = all_capabilities()


#: The 256-bit build without the integer products: each lane's multipliers are the 64-bit
#: lane's, built by the same code for each lane (``ReductionALU.elaborate``), so the w64-full
#: bench checks them on every integer type under Verilator, and tests/test_hw_alu.py's
#: test_integer_ops_every_type[256-True] in all four lanes of a 256-bit ALU.  They were a third
#: of this build's C++ (1.11 MB with the products but int64's, 0.73 MB without any: ``cat
#: obj/*.cpp obj/*.h | wc -c`` in the build folder).
WIDE_WITHOUT_PRODUCTS = frozenset(p for p in INTEGER_AND_COMPARE if p[0] != ReduceOp.PROD)

CONFIGS = [
    pytest.param(64, FULL, id="w64-full"),
    pytest.param(256, WIDE_WITHOUT_PRODUCTS, id="w256-int-minmax-without-prod"),
]
if os.environ.get("NICOLL_ALU_FULL_256"):
    CONFIGS.append(pytest.param(256, FULL, id="w256-full"))


@pytest.mark.parametrize("data_width, capabilities", CONFIGS)
def test_alu_bench(data_width, capabilities, tmp_path):
    key = ("alu", data_width, format_pairs(sorted(capabilities, key=lambda p: (p[1].value, p[0].value))))
    folder = build_design(name=f"alu_w{data_width}_{len(capabilities)}pairs", key=key,
                          toplevel="nicoll_alu", roots=("nicoll.hw.alu",),
                          make_verilog=lambda: alu_verilog(data_width, capabilities)[0])
    env = {"NICOLL_DATA_WIDTH": str(data_width), "NICOLL_SEED": str(data_width),
           "NICOLL_ALU_VECTORS": os.environ.get("NICOLL_ALU_VECTORS", "1000"),
           "NICOLL_ALU_CAPS": format_pairs(capabilities)}
    tests, failed = run_bench(folder, toplevel="nicoll_alu", module="nicoll.sim.benches.alu.bench",
                              test_dir=tmp_path, env=env)
    assert tests == 1, f"expected the bench's test to run, results show {tests}"
    assert failed == 0, f"the ALU bench failed; see {tmp_path / 'sim.log'}"
