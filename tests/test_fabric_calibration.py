"""The schedule cost model calibrated against the simulated cluster: ``cluster_cost_model``
against all-to-all sweeps measured on Verilator (``tests/data/alltoall_sweep.json``: the
command of each sweep is in the file), and ``algorithm="auto"`` of ``Cluster.alltoall``
choosing by it, checked live on the suite's Verilator cluster."""

import json
from pathlib import Path

import numpy as np
import pytest

import nicoll
import nicoll.schedule as sc
from nicoll.plan.schedule_cost import (CostModel, MEASURED_MESSAGE_CYCLES,
                                       cluster_cost_model)
from nicoll.plan.schedule_exec import execute

from collectives_helpers import SIZES
from conftest import cluster_kwargs

SWEEP = json.loads((Path(__file__).parent / "data" / "alltoall_sweep.json").read_text())
SCHEDULES = ("pairwise", "bruck")


def _measured():
    """{(data_width, fabric, nodes, clock, bytes per rank): {algorithm: cycles}}."""
    cases = {}
    for row in SWEEP["rows"]:
        assert row["correct"], row
        key = (row["data_width"], row["fabric"], row["nodes"], row["clock_mhz"],
               row["bytes_per_rank"])
        cases.setdefault(key, {})[row["algorithm"]] = row["cycles_max"]
    return cases


def _estimate(key, algorithm):
    width, fabric, nodes, clock, size = key
    plan = sc.alltoall(nodes, size // 4 // nodes, "float32", algorithm)
    return execute(plan, cost=cluster_cost_model(width, fabric=fabric, clock_mhz=clock)).cycles


def test_the_sweep_covers_both_widths_and_fabrics():
    cases = _measured()
    assert {(k[0], k[1]) for k in cases} == {(w, f) for w in MEASURED_MESSAGE_CYCLES
                                             for f in ("ideal", "roce100")}
    assert all(set(SCHEDULES) <= set(algorithms) for algorithms in cases.values())


@pytest.mark.parametrize("key", sorted(_measured()), ids=lambda k: f"w{k[0]}-{k[1]}-{k[4]}B")
def test_estimates_within_ten_percent(key):
    measured = _measured()[key]
    for algorithm in SCHEDULES:
        estimate = _estimate(key, algorithm)
        assert abs(estimate / measured[algorithm] - 1) <= 0.10, (algorithm, estimate,
                                                                 measured[algorithm])


def test_the_uncalibrated_model_misses():
    """The default per-piece cost (set for the model's own figures) is off by more than the
    calibration allows at 64 bits: the calibration is what makes the test above pass."""
    worst = 0
    for key, measured in _measured().items():
        width, fabric, nodes, clock, size = key
        if width != 64:
            continue
        plan = sc.alltoall(nodes, size // 4 // nodes, "float32", "pairwise")
        cost = CostModel(link_bytes_per_cycle=8, alu_bytes_per_cycle=8, fabric=fabric,
                         clock_mhz=clock)
        worst = max(worst, abs(execute(plan, cost=cost).cycles / measured["pairwise"] - 1))
    assert worst > 0.10


def test_auto_picks_the_faster_in_nine_of_ten():
    cases = _measured()
    right = sum(min(SCHEDULES, key=lambda a: _estimate(key, a))
                == min(SCHEDULES, key=lambda a: measured[a])
                for key, measured in cases.items())
    assert right >= 0.9 * len(cases)


def _repack_estimate(key):
    from nicoll.plan.repack import plan_subgroups
    from nicoll.plan.repack_cost import cluster_repack_cycles
    width, fabric, nodes, clock, size = key
    # The subgroups the cluster ran when the sweep was measured (planned on "ideal").
    plan = plan_subgroups(nodes, size // nodes, data_width=width, max_group=8,
                          capacity_bytes=2048, units=1)
    return cluster_repack_cycles(nodes, size // nodes, plan.dh, plan.dv, width,
                                 fabric=fabric, clock_mhz=clock)


@pytest.mark.parametrize("key", sorted(_measured()), ids=lambda k: f"w{k[0]}-{k[1]}-{k[4]}B")
def test_repack_estimates_within_ten_percent(key):
    """cluster_repack_cycles against the aggregate rows: its three figures were fitted to the
    nine "ideal" rows; the nine "roce100" rows add only the hops."""
    measured = _measured()[key]["aggregate"]
    assert abs(_repack_estimate(key) / measured - 1) <= 0.10, (_repack_estimate(key), measured)


def test_auto_with_aggregate_picks_the_fastest_in_nine_of_ten():
    """Among pairwise, bruck and aggregate: the estimates' fastest is the measured fastest
    (all 18 configurations today; aggregate wins at N = 8, 256 bits, 8-byte blocks)."""
    right = 0
    for key, measured in _measured().items():
        estimates = {a: _estimate(key, a) for a in SCHEDULES}
        estimates["aggregate"] = _repack_estimate(key)
        right += min(estimates, key=estimates.get) == min(measured, key=measured.get)
    assert right >= 0.9 * len(_measured())


def test_cluster_auto_runs_aggregate_where_it_is_cheapest():
    """N = 8, 256 bits, 8-byte blocks under "roce100": the estimates give aggregate (511
    against bruck's 1 110; 534 and 1 109 measured), and the answer is an all-to-all."""
    with nicoll.Cluster(8, data_width=256, fabric="roce100", clock_mhz=137.8) as cl:
        xs = [np.arange(8 * 2, dtype=np.float32) + 100 * r for r in range(8)]
        ys = cl.alltoall(xs)
        assert cl.last_plan.algorithm == "aggregate"
        for j, y in enumerate(ys):
            np.testing.assert_array_equal(y, np.concatenate([x[j * 2:(j + 1) * 2] for x in xs]))
    with nicoll.Cluster(8, data_width=256, fabric="roce100", clock_mhz=137.8,
                        repack_units=0) as cl:
        cl.alltoall(xs)
        assert cl.last_plan.algorithm == "bruck"


def test_cluster_auto_follows_the_cost_model():
    """On the model (no cycles to measure): the choice is the cost model's, made with the
    cluster's width, fabric and clock, and the answer is an all-to-all."""
    for fabric, block, want in (("ideal", 2, "bruck"), ("ideal", 128, "pairwise"),
                                ("roce100", 16, "bruck"), ("roce100", 128, "pairwise")):
        with nicoll.Cluster(16, data_width=64, fabric=fabric, clock_mhz=150.97) as cl:
            xs = [np.arange(16 * block, dtype=np.float32) + 1000 * r for r in range(16)]
            ys = cl.alltoall(xs)
            assert cl.last_plan.algorithm == want, (fabric, block)
            for j, y in enumerate(ys):
                np.testing.assert_array_equal(
                    y, np.concatenate([x[j * block:(j + 1) * block] for x in xs]))


def test_auto_keeps_an_explicit_choice_and_its_errors():
    with nicoll.Cluster(4) as cl:
        xs = [np.arange(8, dtype=np.int32)] * 4
        cl.alltoall(xs, "pairwise")
        assert cl.last_plan.algorithm == "pairwise"
        with pytest.raises(nicoll.NicollError, match="scratch_blocks"):
            cl.alltoall(xs, scratch_blocks=1)


@pytest.mark.verilator
@pytest.mark.xdist_group("verilator")
def test_auto_is_the_faster_on_verilator(clusters):
    """Live, on the suite's Verilator cluster: the algorithm auto picks takes no more cycles
    than the other one, at 8-byte blocks and at 512."""
    nodes = SIZES["verilator"]["nodes"][0]
    cl = clusters("verilator", nodes)
    assert cl.config.mem_size == SIZES["verilator"]["mem_size"]
    for block in (2, 128):
        xs = [np.arange(nodes * block, dtype=np.int32) + 1000 * r for r in range(nodes)]
        cycles = {}
        for algorithm in SCHEDULES:
            cl.alltoall(xs, algorithm)
            cycles[algorithm] = cl.last.cycles
        cl.alltoall(xs)
        picked = cl.last_plan.algorithm
        assert cycles[picked] <= min(cycles.values()), (block, picked, cycles)
    assert cluster_kwargs("verilator")["data_width"] == cl.data_width


# ---- The reductions --------------------------------------------------------------------------
ALLREDUCE = json.loads((Path(__file__).parent / "data" / "allreduce_sweep.json").read_text())


def test_allreduce_estimates_within_a_quarter():
    """Allreduce at N = 8, 256 bits, four algorithms, 8 B to 1 MiB, both fabrics: every
    estimate within 25 % of the measurement (the worst, tree and prt at 8 B on "ideal",
    are 1.24 and 1.25), recursive halving within 11 %.  Charged per segment, with two hops
    each, the 8-byte figures were up to 3× the measured ones."""
    for row in ALLREDUCE["rows"]:
        assert row["correct"], row
        plan = sc.allreduce(row["nodes"], row["bytes_per_rank"] // 4, "float32", "sum",
                            algorithm=row["algorithm"])
        cost = cluster_cost_model(row["data_width"], fabric=row["fabric"],
                                  clock_mhz=row["clock_mhz"])
        ratio = execute(plan, cost=cost).cycles / row["cycles_max"]
        bound = 0.11 if row["algorithm"] == "recursive_halving" else 0.25
        assert abs(ratio - 1) <= bound, (row, ratio)


def test_a_later_segment_pays_no_rendezvous():
    """A message in four segments costs about what it costs in one: one fixed cost and two
    hops, then the later segments' beats.  (Charged as four messages it would cost three
    more fixed costs and six more hops, over 400 cycles here.)"""
    cost = cluster_cost_model(256, fabric="roce100", clock_mhz=125)
    assert cost.hop == 65 and cost.segment(128) == 4

    def cycles(segments):
        plan = sc.allreduce(2, 64, "float32", "sum", algorithm="recursive_halving",
                            segments=segments)
        assert plan.schedules[0].steps[-1].segments == segments
        return execute(plan, cost=cost).cycles
    assert abs(cycles(4) - cycles(1)) < cost.message_cycles


def test_barrier_release_matches_the_cluster():
    """2 + 18 per tree level was fitted to the two "ideal" rows; the "roce100" rows, 2 hops
    a level more, were not used for it."""
    measured = json.loads((Path(__file__).parent / "data" / "barrier_release.json").read_text())
    for row in measured["rows"]:
        cost = cluster_cost_model(256, fabric=row["fabric"], clock_mhz=137.8)
        assert cost.barrier(row["nodes"]) == row["cycles"], row


def test_repack_hops_match_the_aggregate_rows():
    """What the fabric adds to an aggregate exchange (its "roce100" row less its "ideal" row,
    one unit behind node 0) against the repack cost model's hops, 2 + 2 per sub-matrix, at
    the subgroups the cluster planned: within 16 % in all nine configurations (seven within
    6 %; the worst, 15.6 %, is 64 bits, N = 16, 64-byte blocks).  Only the
    fabric's part: the repack model's own figures are about half the measured ones
    (docs/fabric.md)."""
    from nicoll.plan.repack import plan_subgroups
    from nicoll.plan.repack_cost import repack_hops
    from nicoll import FABRICS
    rows = {(r["data_width"], r["nodes"], r["bytes_per_rank"], r["fabric"]): r
            for r in SWEEP["rows"] if r["algorithm"] == "aggregate"}
    checked = 0
    for (width, nodes, size, fabric), row in rows.items():
        if fabric != "roce100":
            continue
        ideal = rows[(width, nodes, size, "ideal")]
        plan = plan_subgroups(nodes, size // nodes, data_width=width, max_group=8,
                              capacity_bytes=2048, units=1)
        p, q = -(-nodes // plan.dh), -(-nodes // plan.dv)
        hop = FABRICS["roce100"].hop_cycles(row["clock_mhz"])
        modelled = repack_hops(p, q, 1) * hop
        measured = row["cycles_max"] - ideal["cycles_max"]
        assert abs(modelled / measured - 1) <= 0.16, (width, nodes, size, modelled, measured)
        checked += 1
    assert checked == 9


UNITS4 = json.loads((Path(__file__).parent / "data" / "alltoall_units4.json").read_text())


def test_four_units_take_at_most_the_one_unit_estimate():
    """cluster_repack_cycles is calibrated for one unit; with four units the measured
    exchanges take 0.25 to 1.11 of it (docs/fabric.md), so for such a build it is an upper
    estimate (alltoall's auto then picks aggregate only where it wins without the overlap)."""
    from nicoll.plan.repack import plan_subgroups
    from nicoll.plan.repack_cost import cluster_repack_cycles
    ratios = []
    for row in UNITS4["rows"]:
        assert row["correct"] and row["repack_units"] == 4, row
        n, width, a = row["nodes"], row["data_width"], row["bytes_per_rank"] // row["nodes"]
        plan = plan_subgroups(n, a, data_width=width, max_group=8, capacity_bytes=2048, units=4,
                              fabric=row["fabric"], clock_mhz=row["clock_mhz"])
        ratios.append(row["cycles_max"] / cluster_repack_cycles(
            n, a, plan.dh, plan.dv, width, fabric=row["fabric"], clock_mhz=row["clock_mhz"]))
    assert len(ratios) == 18
    assert 0.25 <= min(ratios) and max(ratios) <= 1.11, (min(ratios), max(ratios))


CROSSOVER = json.loads((Path(__file__).parent / "data" / "alltoall_crossover.json").read_text())
REPACK_NODE = json.loads((Path(__file__).parent / "data" / "alltoall_repack_node.json").read_text())


def test_one_unit_estimates_hold_out_of_sample():
    """The crossover sweep's one-unit aggregate rows (N = 8, 256 bits, blocks of 8 to 256 B,
    both fabrics; 16 of the 20 at block sizes the fit never saw) within 10 % of
    cluster_repack_cycles at the subgroups the cluster planned on that fabric."""
    from nicoll.plan.repack import plan_subgroups
    from nicoll.plan.repack_cost import cluster_repack_cycles
    checked = 0
    for row in CROSSOVER["rows"]:
        if row["algorithm"] != "aggregate" or row["repack_units"] != 1:
            continue
        assert row["correct"], row
        n, a = row["nodes"], row["bytes_per_rank"] // row["nodes"]
        plan = plan_subgroups(n, a, data_width=row["data_width"], max_group=8,
                              capacity_bytes=2048, units=1, fabric=row["fabric"],
                              clock_mhz=row["clock_mhz"])
        estimate = cluster_repack_cycles(n, a, plan.dh, plan.dv, row["data_width"],
                                         fabric=row["fabric"], clock_mhz=row["clock_mhz"])
        assert abs(estimate / row["cycles_max"] - 1) <= 0.10, (row, estimate)
        checked += 1
    assert checked == 20


def _in_switch_rows(**match):
    """The repack-node rows measured with each unit on a switch port of its own."""
    return [r for r in REPACK_NODE["rows"] if r["repack_node"] and r["unit_ports"]
            and all(r[k] == v for k, v in match.items())]


def _switch_estimate(row, units):
    from nicoll.plan.repack import plan_subgroups
    from nicoll.plan.repack_cost import cluster_repack_cycles
    n, width, a = row["nodes"], row["data_width"], row["bytes_per_rank"] // row["nodes"]
    plan = plan_subgroups(n, a, data_width=width, max_group=8, capacity_bytes=2048,
                          units=units, fabric=row["fabric"], clock_mhz=row["clock_mhz"])
    return cluster_repack_cycles(n, a, plan.dh, plan.dv, width, fabric=row["fabric"],
                                 clock_mhz=row["clock_mhz"], units=units)


def test_the_repack_node_meets_the_two_fold_target():
    """docs/fabric.md's figure: with the four units in the switch (each on a port of its
    own), N = 16, 256 bits, 8-byte blocks under "roce100", aggregate takes at most half the
    cycles of the faster of pairwise and bruck on the same build (599 against 1 491)."""
    rows = {r["algorithm"]: r["cycles_max"]
            for r in _in_switch_rows(nodes=16, data_width=256, fabric="roce100",
                                     bytes_per_rank=128, repack_units=4)}
    assert all(r["correct"] for r in _in_switch_rows())
    assert 2 * rows["aggregate"] <= min(rows["pairwise"], rows["bruck"])


def test_units_in_the_switch_estimates_within_ten_percent():
    """cluster_repack_cycles(units=4) against the 18 four-unit aggregate rows of the repack
    node: its two figures for several units (MEASURED_SWITCH_UNIT_CYCLES) were fitted to the
    twelve 256-bit rows; the six 64-bit rows are out of the fit, and two of them miss: 64
    bits on "ideal" at 8 and 512-byte blocks, 0.85 and 0.86 of the measured cycles (the
    control tree's notices take four beats each there, one at 256 bits; g1 and g2 do not
    scale with that).  With one unit on its own port the one-unit figure holds as well (the
    six rows at N = 16, 256 bits)."""
    misses = []
    for units, count in ((4, 18), (1, 6)):
        rows = _in_switch_rows(algorithm="aggregate", repack_units=units)
        assert len(rows) == count
        for row in rows:
            ratio = _switch_estimate(row, units) / row["cycles_max"]
            if abs(ratio - 1) > 0.10:
                misses.append((row["data_width"], row["fabric"], row["bytes_per_rank"], units))
            assert abs(ratio - 1) <= 0.16, (row, ratio)
    assert misses == [(64, "ideal", 128, 4), (64, "ideal", 8192, 4)], misses


def test_auto_with_units_in_the_switch_picks_the_fastest():
    """Among pairwise, bruck and aggregate on the four-unit repack node: the estimates'
    fastest is the measured fastest in all 18 configurations (N = 16 at 64 and 256 bits, N = 8
    at 256 bits; 8, 64 and 512-byte blocks; both fabrics; the
    closest: N = 16, 256 bits, 64-byte blocks under "roce100", aggregate 1 590 against
    bruck's 1 592 estimated, 1 542 against 1 587 measured).  With the one-unit figure,
    which "auto" used for every build before, it kept bruck at 8-byte blocks there, where
    aggregate is 2.49× faster."""
    cases = {}
    for row in _in_switch_rows(repack_units=4):
        key = (row["nodes"], row["data_width"], row["fabric"], row["bytes_per_rank"])
        cases.setdefault(key, {})[row["algorithm"]] = row
    right = 0
    for key, rows in cases.items():
        if len(rows) < 3:
            continue
        nodes, width, fabric, size = key
        clock = rows["aggregate"]["clock_mhz"]
        cost = cluster_cost_model(width, fabric=fabric, clock_mhz=clock)
        estimates = {a: execute(sc.alltoall(nodes, size // 4 // nodes, "float32", a),
                                cost=cost).cycles for a in SCHEDULES}
        estimates["aggregate"] = _switch_estimate(rows["aggregate"], 4)
        measured = {a: row["cycles_max"] for a, row in rows.items()}
        right += min(estimates, key=estimates.get) == min(measured, key=measured.get)
    assert right >= 0.9 * 18 and len([k for k in cases if len(cases[k]) == 3]) == 18


def test_cluster_auto_on_the_repack_node_runs_aggregate():
    """The headline case on the model: N = 16, 256 bits, four units in the switch, 8-byte
    blocks under "roce100": auto runs aggregate (measured 599 cycles against bruck's
    1 491); the same build with the units behind node 0's port keeps bruck (its one-unit
    upper estimate, 1 483, is not below bruck's 1 480)."""
    xs = [np.arange(16 * 2, dtype=np.float32) + 100 * r for r in range(16)]
    for repack_node, want in ((True, "aggregate"), (False, "bruck")):
        with nicoll.Cluster(16, data_width=256, fabric="roce100", clock_mhz=137.8,
                            repack_units=4, repack_node=repack_node) as cl:
            ys = cl.alltoall(xs)
            assert cl.last_plan.algorithm == want, repack_node
            for j, y in enumerate(ys):
                np.testing.assert_array_equal(
                    y, np.concatenate([x[j * 2:(j + 1) * 2] for x in xs]))


def test_alltoallv_auto_picks_the_measured_faster_in_nine_of_ten():
    """alltoallv's "auto" (pairwise or aggregate) on the model, run at every one-unit
    configuration of the two sweeps with blocks of whole float32s: its choice is the faster
    of the two measured rows in 32 of the 34 (the misses, at N = 8 and 256 bits, are the
    crossover's neighbours: 304 against 291 cycles, 1 314 against 1 285).  The seed's own
    cost model, which "auto" followed before, was right in 18.  With equal blocks
    alltoallv's pairwise schedule is alltoall's (checked here on the cost model), so the
    alltoall rows stand for it."""
    cases = {}
    for row in SWEEP["rows"] + CROSSOVER["rows"]:
        if row.get("repack_units", 1) == 1 and (row["bytes_per_rank"] // row["nodes"]) % 4 == 0:
            key = (row["data_width"], row["fabric"], row["nodes"], row["clock_mhz"],
                   row["bytes_per_rank"])
            cases.setdefault(key, {})[row["algorithm"]] = row["cycles_max"]
    right = 0
    for key, measured in cases.items():
        width, fabric, nodes, clock, size = key
        length = size // nodes // 4
        cost = cluster_cost_model(width, fabric=fabric, clock_mhz=clock)
        sizes = [[length] * nodes] * nodes
        assert (execute(sc.alltoallv(sizes, "float32", "pairwise"), cost=cost).cycles
                == execute(sc.alltoall(nodes, length, "float32", "pairwise"), cost=cost).cycles)
        with nicoll.Cluster(nodes, data_width=width, fabric=fabric, clock_mhz=clock) as cl:
            blocks = [[np.full(length, 100 * i + j, np.float32) for j in range(nodes)]
                      for i in range(nodes)]
            out = cl.alltoallv(blocks)
            picked = cl.last_plan.algorithm
        assert all(out[j][i].tobytes() == blocks[i][j].tobytes()
                   for i in range(nodes) for j in range(nodes))
        right += picked == min(("pairwise", "aggregate"), key=measured.get)
    assert len(cases) == 34 and right >= 0.9 * len(cases), (right, len(cases))
