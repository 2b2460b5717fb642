"""cocotb + Verilator bench of the CSR slave of one NicCore (sim/benches/csr/bench.py).

One build folder per configuration, cached across runs.  NICOLL_CSR_OPS sets the number of
random transactions per bench test (default 2000; CI keeps the default).
"""

import os

import pytest

from nicoll.sim.verilator_backend import build_design, run_bench

pytestmark = pytest.mark.verilator


# The default run builds the demo's configuration (256 bits, 8 nodes).  The 64-bit, 64-node
# build runs when asked for (NICOLL_CSR_ALL=1): each build costs one to two minutes of a core,
# the register map does not depend on the width, and the build registers of a 64-node core are
# read back in the Amaranth simulator by tests/test_hw_niccore.py::test_niccore_default, those
# of a 64-bit core by the Verilator cluster's tests (tests/test_driver.py).
@pytest.mark.parametrize("data_width, node_id, max_nodes", [
    pytest.param(64, 3, 64, marks=pytest.mark.skipif(
        not os.environ.get("NICOLL_CSR_ALL"),
        reason="a second core build (1-2 min); set NICOLL_CSR_ALL=1 to run it")),
    (256, 0, 8)])
def test_csr_slave_bench(data_width, node_id, max_nodes, tmp_path):
    from nicoll.hw.sim.cluster import niccore_verilog
    from nicoll.sim.benches.csr.bench import ALU_CAPABILITIES
    params = dict(data_width=data_width, max_nodes=max_nodes, mem_size=1024,
                  alu_capabilities=ALU_CAPABILITIES)
    folder = build_design(name=f"niccore_w{data_width}", key=("niccore", params),
                          toplevel="nicoll_niccore", roots=("nicoll.hw.sim.cluster",),
                          make_verilog=lambda: niccore_verilog(**params))
    env = {"NICOLL_DATA_WIDTH": str(data_width), "NICOLL_MAX_NODES": str(max_nodes),
           "NICOLL_MEM_SIZE": "1024", "NICOLL_NODE_ID": str(node_id),
           "NICOLL_SEED": str(data_width + node_id),
           "NICOLL_OPS": os.environ.get("NICOLL_CSR_OPS", "2000")}
    tests, failed = run_bench(folder, toplevel="nicoll_niccore", module="nicoll.sim.benches.csr.bench",
                              test_dir=tmp_path, env=env)
    assert tests == 3, f"expected the bench's 3 tests to run, results show {tests}"
    assert failed == 0, f"{failed} of {tests} bench tests failed; see {tmp_path / 'sim.log'}"
