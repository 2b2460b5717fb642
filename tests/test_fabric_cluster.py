"""The fabric in the simulated cluster: :meth:`nicoll.Fabric.sim_links` (the hop and the wire
in cycles, worked out here from the profile's numbers), ``nicoll.Cluster(fabric=...)``, and a
cluster whose links carry a latency: the same answers as without, later by exactly the hops
the protocol crosses."""

from fractions import Fraction
import math

import numpy as np
import pytest

import nicoll
from nicoll import FABRICS, Fabric, NicollError
from nicoll.config import ClusterConfig
from nicoll.fabric import SimLinks
from nicoll.hw.net.packet import header_beats
from nicoll.hw.sim.cluster import ClusterTop

ROCE = FABRICS["roce100"]


# ---- Fabric.sim_links ---------------------------------------------------------------------------
def test_ideal_builds_no_links():
    links = FABRICS["ideal"].sim_links(125, 256)
    assert links == SimLinks() and links.ideal and links.slug() == ""
    config = ClusterConfig(nodes=2, max_nodes=8)
    assert "uplink_latency" not in config.hw_kwargs()


@pytest.mark.parametrize("clock, width", [(125, 256), (137.8, 256), (150.97, 64)])
def test_roce_links_split_the_hop(clock, width):
    links = ROCE.sim_links(clock, width)
    hop = math.ceil(Fraction(ROCE.hop_ns) * Fraction(clock) / 1000)
    assert links.uplink + links.downlink == hop
    assert links.uplink - links.downlink in (0, 1)
    # At 100 Gb/s the wire carries a packet faster than the core's beats (W·f is 9.7 to
    # 35 Gb/s here): nothing to add per packet.
    assert links.gap == 0
    assert not links.ideal and links.slug() == f"_f{links.uplink}-{links.downlink}-0"


def test_a_slow_link_leaves_a_gap():
    # 1 Gb/s at 125 MHz: 64 bits a cycle would be 8 Gb/s.  The worst packet is the smallest:
    # a 64-byte minimum frame with preamble and gap, 84 bytes = 672 ns on the wire = 84
    # cycles, against the one header beat a 256-bit packet takes.
    slow = Fabric(link_gbps=1, preamble_bytes=8, ifg_bytes=12, l2_header_bytes=14,
                  fcs_bytes=4, min_frame_bytes=64, mtu_bytes=1500)
    links = slow.sim_links(125, 256)
    assert header_beats(256) == 1
    # A payload of p bytes: its wire time less its beats; the largest over p.
    worst = max(math.ceil(Fraction(8 * slow.wire_bytes(p)) * 125 / 1000) - -(-p // 32) - 1
                for p in range(0, 1501))
    assert links.gap == worst >= 84 - 1
    assert links.uplink == links.downlink == 0


def test_cluster_takes_a_fabric():
    cl = nicoll.Cluster(2, fabric="roce100", clock_mhz=125)
    assert cl.fabric is ROCE and cl.clock_mhz == 125
    assert cl.config.links == ROCE.sim_links(125, 256)
    assert cl.config.slug().endswith(cl.config.links.slug())
    from nicoll.plan.schedule_cost import cluster_cost_model
    assert cl.cost_model == cluster_cost_model(256, fabric=ROCE, clock_mhz=125)
    cl.close()
    default = nicoll.Cluster(2)
    assert default.fabric is FABRICS["ideal"] and default.config.links.ideal
    default.close()


@pytest.mark.parametrize("kwargs, words", [
    (dict(fabric="roce400"), "fabric must be a nicoll.Fabric or one of"),
    (dict(fabric=3), "fabric must be a nicoll.Fabric or one of"),
    (dict(fabric="roce100", clock_mhz=0), "clock_mhz must be a positive number"),
    (dict(fabric="roce100", clock_mhz="fast"), "clock_mhz must be a positive number"),
])
def test_bad_fabric_arguments_are_named(kwargs, words):
    with pytest.raises(NicollError, match=words):
        nicoll.Cluster(2, **kwargs)


def test_cluster_top_refuses_bad_link_figures():
    with pytest.raises(ValueError, match="latency must be a non-negative"):
        ClusterTop(nodes=2, max_nodes=8, data_width=64, uplink_latency=-1)
    with pytest.raises(TypeError, match="gap must be an integer"):
        ClusterTop(nodes=2, max_nodes=8, data_width=64, link_gap=1.5)


# ---- A cluster with links ----------------------------------------------------------------------
#: A fabric of a round 40 cycles per hop at 100 MHz (400 ns), split 20 and 20.
HOP40 = Fabric(switch_ns=400.0)


def _run(fabric, work):
    with nicoll.Cluster(2, backend="amaranth", data_width=64, max_nodes=8, mem_size=1 << 12,
                        alu_capabilities=[("sum", "int32")], fabric=fabric,
                        clock_mhz=100) as cl:
        return work(cl), cl.last.cycles


@pytest.mark.xdist_group("amaranth_fabric")
def test_links_delay_by_the_hops_crossed():
    assert HOP40.sim_links(100, 64) == SimLinks(uplink=20, downlink=20)
    xs = [np.arange(8, dtype=np.int32) + 100 * r for r in range(2)]

    def exchange(cl):
        return cl.alltoall(xs, "pairwise")
    ideal, ideal_cycles = _run("ideal", exchange)
    slow, slow_cycles = _run(HOP40, exchange)
    for got in (ideal, slow):
        np.testing.assert_array_equal(got[0], np.r_[xs[0][:4], xs[1][:4]])
        np.testing.assert_array_equal(got[1], np.r_[xs[0][4:], xs[1][4:]])
    # Two ranks' pairwise exchange: the clear-to-send crosses one path (a hop each way), the
    # data the next and the receiver's ACK a third, each 40 cycles slower; the ideal run's
    # ACK arrives a few cycles before its receive's last write, so that much of the third
    # path's delay is hidden.
    assert 2 * 40 < slow_cycles - ideal_cycles <= 3 * 40


# The Verilator cluster's links (built beside the cores' instances) are checked against the
# Amaranth cluster's, cycle for cycle, in test_repack_node.py, on the build that also has the
# repack node (one Verilator cluster build for both).


def test_alltoallv_auto_plans_on_the_clusters_fabric():
    """alltoallv's "auto" weighs the exchange with the cluster's fabric and clock: 24-byte
    blocks at N = 8 (256 bits, one unit) go pairwise on "ideal" but through the units on
    "roce100", where pairwise pays a hop for each of its seven messages in turn and the
    units two for each of their few sub-matrices; the units' subgroups are the ones the
    repack planner picks for that fabric."""
    from nicoll.plan.repack import plan_subgroups
    nodes, length = 8, 6                        # 6 float32: 24 bytes a block
    for fabric, want in (("ideal", "pairwise"), ("roce100", "aggregate")):
        with nicoll.Cluster(nodes, fabric=fabric, clock_mhz=125) as cl:
            blocks = [[np.full(length, 10 * i + j, np.float32) for j in range(nodes)]
                      for i in range(nodes)]
            out = cl.alltoallv(blocks)
            assert cl.last_plan.algorithm == want, fabric
            if want == "aggregate":
                repack = cl.device(0).repack
                plan = plan_subgroups(nodes, 4 * length, data_width=256,
                                      max_group=repack.max_group, capacity_bytes=repack.capacity,
                                      units=repack.units, fabric=fabric, clock_mhz=125)
                assert (cl.last_plan.repack.dh, cl.last_plan.repack.dv) == (plan.dh, plan.dv)
            for i in range(nodes):
                for j in range(nodes):
                    np.testing.assert_array_equal(out[j][i], blocks[i][j])
