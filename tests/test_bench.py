"""nicoll bench: the size sweep, the bound, and a sweep on the model backend."""

import pytest

from nicoll import NicollError
from nicoll.cli.bench_run import bound_cycles, parse_sizes, run_bench
from nicoll.cli import main


def test_sizes():
    assert parse_sizes("1:1M")[:3] == [1, 2, 4] and parse_sizes("1:1M")[-1] == 1 << 20
    assert len(parse_sizes("1:1M")) == 21
    assert parse_sizes("64,4k,1M") == [64, 4096, 1 << 20]
    for bad in ("0:8", "16:8", "x", "4q"):
        with pytest.raises(NicollError):
            parse_sizes(bad)


def test_bound_is_the_design_bound():
    # 2 (N-1)/N · L / W for allreduce, (N-1)/N · L / W for the others (DESIGN.md, "Measures").
    assert bound_cycles("allreduce", 8, 1 << 20, 256) == 2 * 7 / 8 * (1 << 20) / 32
    assert bound_cycles("reduce_scatter", 8, 1 << 20, 256) == 7 / 8 * (1 << 20) / 32
    assert bound_cycles("allgather", 4, 64, 64) == 3 / 4 * 256 / 8


def test_sizes_below_one_element_make_one_row():
    rows, _ = run_bench("allreduce", nodes=3, sizes=[1, 2, 4, 8], backend="model")
    assert [row.size for row in rows] == [4, 8]
    assert all(row.correct for row in rows)


def test_the_model_backend_prints_the_calibrated_estimate():
    """The model counts no cycles: its rows carry the calibrated cost models' cycles for the
    plan that ran, marked as estimates (an aggregate exchange's at the subgroups it ran)."""
    import nicoll.schedule as sc
    from nicoll.plan.repack import plan_subgroups
    from nicoll.plan.repack_cost import cluster_repack_cycles
    from nicoll.plan.schedule_cost import cluster_cost_model
    from nicoll.plan.schedule_exec import execute
    rows, _ = run_bench("alltoall", nodes=8, sizes=[64, 4096], backend="model", data_width=64,
                        algorithms=("pairwise", "bruck", "aggregate"), fabric="roce100",
                        clock_mhz=150.0)
    cost = cluster_cost_model(64, fabric="roce100", clock_mhz=150.0)
    for row in rows:
        assert row.correct
        if row.algorithm == "aggregate":
            block = row.size // 8
            plan = plan_subgroups(8, block, data_width=64, max_group=8, capacity_bytes=2048,
                                  fabric="roce100", clock_mhz=150.0)
            assert row.estimated and row.cycles_max == cluster_repack_cycles(
                8, block, plan.dh, plan.dv, 64, fabric="roce100", clock_mhz=150.0) > 0
            continue
        plan = sc.alltoall(8, row.size // 4 // 8, "float32", row.algorithm)
        assert row.estimated and row.cycles_max == row.cycles_min == execute(plan, cost=cost).cycles
        assert row.as_dict()["estimated"] is True
    rows, _ = run_bench("allreduce", nodes=4, sizes=[1024], backend="model")
    plan = sc.allreduce(4, 256, "float32", "sum")
    assert rows[0].estimated and rows[0].cycles_max == execute(
        plan, cost=cluster_cost_model(256, clock_mhz=125.0)).cycles


def test_cli_sweep_on_the_model_writes_csv(tmp_path, capsys):
    path = tmp_path / "out.csv"
    assert main(["bench", "alltoall", "--nodes", "4", "--sizes", "64,256", "--backend", "model",
                 "--algorithm", "pairwise,bruck", "--csv", str(path)]) == 0
    lines = path.read_text().splitlines()
    assert lines[0].startswith("collective,algorithm,nodes,size")
    assert len(lines) == 1 + 2 * 2 and all(line.endswith("True") for line in lines[1:])
    assert main(["bench", "allreduce", "--backend", "model", "--algorithm", "nope"]) == 2
    assert "has no algorithm 'nope'" in capsys.readouterr().err


def test_cli_takes_a_fabric(capsys):
    assert main(["bench", "alltoall", "--nodes", "4", "--sizes", "64", "--backend", "model",
                 "--fabric", "roce100", "--clock-mhz", "125"]) == 0
    assert "fabric roce100" in capsys.readouterr().out
    assert main(["bench", "alltoall", "--nodes", "4", "--sizes", "64", "--backend", "model",
                 "--fabric", "roce400"]) == 2
    assert "fabric must be a nicoll.Fabric or one of 'ideal', 'roce100'" in capsys.readouterr().err
