"""cocotb + Verilator bench of the repack array (sim/benches/repack/bench.py), one build per
configuration.

One build (16 ranks, 4 units, max_group 8, 64-bit beats, 8 KiB unit buffers) serves every N
and the N = 16 measurement; a second, smaller one (11 ranks, one unit, max_group 5, 128-bit
beats) checks a wider datapath, where several blocks share a beat and five table banks are
read at once, and one unit working through every sub-matrix in turn.  Builds are cached
under build/verilator (key: every hw/ source, so any gateware edit builds anew); on two idle
cores they take about 50 s and 20 s, the eleven runs about 35 s together.

More random exchanges per N (default 4), other seeds (default 0):

    NICOLL_REPACK_ROUNDS=40 NICOLL_REPACK_SEED=7 .venv/bin/pytest tests/test_repack_cocotb.py

The measurement prints the figures docs/repack.md quotes:

    .venv/bin/pytest tests/test_repack_cocotb.py -k measure -s
"""

import json
import os

import pytest

from nicoll.hw.sim.repack_top import TOPLEVEL, repack_verilog
from nicoll.sim.verilator_backend import build_design, run_bench

pytestmark = pytest.mark.verilator

def seed(n, salt):
    """Seed of the bench's random choices for ``n`` ranks."""
    return salt + 100 * n + 100_000 * int(os.environ.get("NICOLL_REPACK_SEED", "0"))


#: (max_ranks, units, max_group, data_width, capacity_bytes) of the two builds.
MAIN = (16, 4, 8, 64, 8192)
WIDE = (11, 1, 5, 128, 2048)


def build(config):
    ranks, units, group, width, capacity = config
    return build_design(name=f"repack_r{ranks}_u{units}_g{group}_w{width}_c{capacity}",
                        key=("repack", *config), toplevel=TOPLEVEL,
                        roots=("nicoll.hw.sim.repack_top",),
                        make_verilog=lambda: repack_verilog(*config))


def run(config, tmp_path, tests, **env):
    folder = build(config)
    env = {"NICOLL_REPACK_CONFIG": ",".join(map(str, config)),
           "NICOLL_REPACK_ROUNDS": os.environ.get("NICOLL_REPACK_ROUNDS", "4"),
           "COCOTB_TEST_FILTER": tests, **{k: str(v) for k, v in env.items()}}
    count, failed = run_bench(folder, toplevel=TOPLEVEL, module="nicoll.sim.benches.repack.bench",
                              test_dir=tmp_path, env=env)
    return count, failed


#: Tests of one build run on one xdist worker (``--dist loadgroup``): spread over two, the
#: second would wait on the first one's build lock for the whole build.
ON_MAIN = pytest.mark.xdist_group("repack_main")
ON_WIDE = pytest.mark.xdist_group("repack_wide")


@ON_MAIN
@pytest.mark.parametrize("n", [1, 2, 3, 4, 6, 8, 11, 16])
def test_repack_exchanges_and_bad_input(n, tmp_path):
    """Random exchanges over n ranks equal the numpy transpose; every bad input is counted
    and reported, never a hang."""
    count, failed = run(MAIN, tmp_path, r"\.(exchanges|bad_input)$",
                        NICOLL_REPACK_N=n, NICOLL_SEED=seed(n, 1))
    assert count == 2, f"expected the bench's two tests to run, results show {count}"
    assert failed == 0, f"the repack bench failed for N = {n}; see {tmp_path / 'sim.log'}"


@ON_WIDE
@pytest.mark.parametrize("n", [3, 11])
def test_repack_wide_datapath(n, tmp_path):
    """The same on 128-bit beats and a single unit."""
    count, failed = run(WIDE, tmp_path, r"\.(exchanges|bad_input)$",
                        NICOLL_REPACK_N=n, NICOLL_SEED=seed(n, 2))
    assert count == 2, f"expected the bench's two tests to run, results show {count}"
    assert failed == 0, f"the repack bench failed for N = {n}; see {tmp_path / 'sim.log'}"


@ON_MAIN
def test_repack_measure_16_ranks(tmp_path, capsys):
    """N = 16, 8-byte blocks: messages and cycles per rank against direct exchange."""
    report = tmp_path / "report.json"
    count, failed = run(MAIN, tmp_path, r"\.measure$", NICOLL_REPACK_REPORT=report)
    assert count == 1 and failed == 0, f"the measurement failed; see {tmp_path / 'sim.log'}"
    figures = json.loads(report.read_text())
    n = figures["n"]
    lines = [f"direct pairwise: {n - 1} + {n - 1} messages per rank, at least {n - 1} wire "
             f"cycles (one beat per message)"]
    for r in figures["repack"]:
        assert r["messages_out"] == [-(-n // r["dv"])] and r["messages_in"] == [-(-n // r["dh"])]
        lines.append(
            f"repack dh=dv={r['dh']}: {r['messages_out'][0]} + {r['messages_in'][0]} messages "
            f"and {r['notices_per_rank']:g} notices per rank, {r['submatrices']} sub-matrices; "
            f"{r['cycles']} cycles start..end (ranks DONE at {r['rank_done'][0]}.."
            f"{r['rank_done'][1]}); units busy {r['unit_busy_cycles']} cycles moving "
            f"{r['unit_beats_moved']} beats")
    with capsys.disabled():
        print()
        for line in lines:
            print("  " + line)
