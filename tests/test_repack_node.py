# amaranth: UnusedElaboratable=no
"""The repack units in the switch (``Cluster(..., repack_node=True)``, where seed 003 places
them): node 0 is an ordinary rank, the ranks register with and hear from node ``nodes``, each
unit has a switch port of its own, and every aggregate exchange still gives MPI's answer, on
each backend."""

import itertools

import numpy as np
import pytest

import nicoll
from nicoll.hw.net.switch import RepackSteering
from nicoll.hw.sim.cluster import ClusterTop

from nicoll.plan import reduction_order as order

from collectives_helpers import LINKED_REPACK_NODE_CLUSTER, check_aggregate


def _exchange(cl, rng, blocks=(0, 1, 3)):
    """All-to-all of int32 blocks of each size in ``blocks`` and an all-to-all-v with empty
    blocks, through the repack units; every answer checked."""
    n = cl.nodes
    for block in blocks:
        xs = [rng.integers(-1 << 30, 1 << 30, n * block, dtype=np.int32) for _ in range(n)]
        outputs = cl.alltoall(xs, "aggregate")
        assert cl.last_plan.algorithm == "aggregate"
        for r, (got, ref) in enumerate(zip(outputs, order.reference("alltoall", xs))):
            assert got.tobytes() == ref.tobytes(), f"rank {r}, blocks of {block}"
    sizes = rng.integers(1, 6, (n, n)) * (rng.random((n, n)) >= 0.4)
    blocks = [[rng.integers(0, 256, sizes[i][j], dtype=np.uint8) for j in range(n)]
              for i in range(n)]
    outputs = cl.alltoallv(blocks, "aggregate")
    for i, j in itertools.product(range(n), repeat=2):
        assert outputs[j][i].tobytes() == blocks[i][j].tobytes(), (i, j)


def _check_places(cl):
    n = cl.nodes
    assert cl.config.hub == n and cl.config.hw_nodes == n + 1
    assert cl.repack_device.repack.units >= 1
    assert all(cl.device(r).repack.units == 0 for r in range(n)), "every rank is ordinary"
    # Each rank sent its registration and one message per destination subgroup, all to the
    # repack node, and node 0 carried nothing for anyone else.
    lay0 = cl.last_plan.layouts[0]
    assert cl.last.packets[0] == 1 + lay0.sends


def test_model():
    rng = np.random.default_rng(3)
    with nicoll.Cluster(8, data_width=256, repack_node=True) as cl:
        assert cl.config.max_nodes == 9                 # room for the repack node's id
        _exchange(cl, rng)
        _check_places(cl)
        # Several sub-matrices, one after another through one unit.
        xs = [rng.integers(0, 1 << 15, 8, dtype=np.int16) for _ in range(8)]
        outputs = cl.alltoall(xs, "aggregate", subgroup=3)
        assert cl.last_plan.repack.dh == 3
        for got, ref in zip(outputs, order.reference("alltoall", xs)):
            assert got.tobytes() == ref.tobytes()


@pytest.mark.xdist_group("verilator_fabric")
def test_amaranth_and_verilator_agree_with_links():
    """Two units in the switch and links with a latency, on both simulators: the same
    answers in the same cycles.  One configuration for both features, because each
    Verilator cluster build takes a minute or more of a worker (the links alone are checked
    against the hops they add in test_fabric_cluster.py, on the Amaranth cluster).  The
    subgroups of one rank make nine sub-matrices, so both units' ports carry messages."""
    def run(backend):
        rng = np.random.default_rng(4)
        xs = [np.arange(9, dtype=np.int32) * 3 + 100 * r for r in range(3)]
        cycles = []
        with nicoll.Cluster(backend=backend, **LINKED_REPACK_NODE_CLUSTER) as cl:
            # The suite's aggregate exchanges (test_collectives_alltoall's; the Amaranth
            # cluster's cases on both, to compare their cycles), with every counter checked,
            # on the units in the switch.
            check_aggregate(cl, "amaranth", 3)
            cycles.append(cl.last.cycles)
            _exchange(cl, rng, blocks=(2,))
            cycles.append(cl.last.cycles)
            _check_places(cl)
            ones = [rng.integers(0, 1 << 15, 3, dtype=np.int16) for _ in range(3)]
            exchanged_ones = cl.alltoall(ones, "aggregate", subgroup=1)
            assert cl.last_plan.repack.units == 2 and cl.last_plan.repack.dh == 1
            for got, ref in zip(exchanged_ones, order.reference("alltoall", ones)):
                assert got.tobytes() == ref.tobytes()
            cycles.append(cl.last.cycles)
            exchanged = cl.alltoall(xs, "pairwise")
            cycles.append(cl.last.cycles)
            summed = cl.allreduce(xs, op="sum")
            cycles.append(cl.last.cycles)
        return exchanged + summed, cycles

    want, want_cycles = run("amaranth")
    got, got_cycles = run("verilator")
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got[3], sum(np.arange(9, dtype=np.int32) * 3 + 100 * r
                                              for r in range(3)))
    assert got_cycles == want_cycles and min(got_cycles) > 0


def test_bad_arguments_are_refused():
    with pytest.raises(nicoll.NicollError, match="repack_node needs repack units"):
        nicoll.Cluster(4, repack_node=True, repack_units=0)
    with pytest.raises(nicoll.NicollError, match="nodes \\+ 1 = 9 must be at most max_nodes=8"):
        nicoll.Cluster(8, repack_node=True, max_nodes=8)
    with pytest.raises(nicoll.NicollError, match="repack_node must be a bool, not 'yes'"):
        nicoll.Cluster(4, repack_node="yes")
    with pytest.raises(TypeError, match="repack_node must be a bool"):
        ClusterTop(nodes=2, max_nodes=4, repack_node=1)
    with pytest.raises(ValueError, match="needs repack units"):
        ClusterTop(nodes=2, max_nodes=4, repack_node=True, repack_units=0)
    with pytest.raises(ValueError, match="nodes \\+ 1 must be at most max_nodes \\(4\\)"):
        ClusterTop(nodes=4, max_nodes=4, repack_node=True)


def _units_of_each_core(top):
    """The repack units of each core of ``top`` (the cores are only looked at, not built)."""
    for core in top.cores:
        core._MustUse__silence = True
    return [core._repack_units for core in top.cores]


def test_gateware_places_the_units_on_their_own_port():
    top = ClusterTop(nodes=3, max_nodes=4, data_width=64, mem_size=4096, repack_node=True,
                     repack_units=2)
    assert top.hw_nodes == 4 and top.hub == 3
    assert _units_of_each_core(top) == [0, 0, 0, 2]
    assert hasattr(top, "n3_s_axil") and not hasattr(top, "n4_s_axil")
    # Each unit on a switch port of its own, after the cores' ports, and the switch steers
    # the units' messages there.
    top.switch._MustUse__silence = True             # only looked at, not built
    assert top.switch_ports == 6 and top.switch.ports == 6
    assert top.switch._steering == RepackSteering(hub=3, first_port=4, units=2)
    hub_core = top.cores[3]
    assert hasattr(hub_core, "unit_tx_1") and not hasattr(hub_core, "unit_tx_2")
    assert not hasattr(top.cores[0], "unit_tx_0")
    plain = ClusterTop(nodes=3, max_nodes=4, data_width=64, mem_size=4096)
    assert plain.hw_nodes == 3 and plain.hub == 0 and plain.switch_ports == 3
    assert _units_of_each_core(plain) == [1, 0, 0]
    plain.switch._MustUse__silence = True
    assert plain.switch._steering is None and not hasattr(plain.cores[0], "unit_tx_0")
