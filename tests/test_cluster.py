"""Cluster construction: argument checks (no backend is started for bad input) and lifetime."""

import numpy as np
import pytest

import nicoll
from nicoll import NicollError


@pytest.mark.parametrize("kwargs, message", [
    (dict(nodes=0), r"nodes must be between 1 and max_nodes=8, not 0"),
    (dict(nodes=65, max_nodes=64), r"nodes must be between 1 and max_nodes=64, not 65"),
    (dict(nodes=5000), r"max_nodes must be between 1 and 4096, not 5000"),
    (dict(nodes=9, max_nodes=8), r"nodes must be between 1 and max_nodes=8, not 9"),
    (dict(nodes="4"), r"nodes must be an int, not '4'"),
    (dict(nodes=2, backend="fpga"),
     r"unknown backend 'fpga'; choose one of 'model', 'amaranth', 'verilator'"),
    (dict(nodes=2, data_width=100), r"data_width must be one of 64, 128, 256, 512, not 100"),
    (dict(nodes=2, mem_size=3000), r"mem_size must be a power of two, a multiple of 32 bytes .* not 3000"),
    (dict(nodes=2, max_nodes=0), r"max_nodes must be between 1 and 4096, not 0"),
])
@pytest.mark.parametrize("backend", ["model", "amaranth", "verilator"])
def test_bad_arguments_raise_nicoll_error(kwargs, message, backend):
    kwargs = {"backend": backend, **kwargs}
    with pytest.raises(NicollError, match=message):
        nicoll.Cluster(**kwargs)


def test_nicoll_error_is_a_value_error():
    assert issubclass(NicollError, ValueError)


def test_context_manager_closes():
    with nicoll.Cluster(nodes=2) as cl:
        assert cl.device(1).node_id == 1
    with pytest.raises(NicollError, match="closed"):
        cl.device(0)
    cl.close()      # closing twice is harmless


def test_public_names():
    assert set(nicoll.__all__) >= {"Cluster", "Device", "NicollError"}
    for name in nicoll.__all__:
        assert hasattr(nicoll, name), name


def test_cluster_of_max_nodes_opens_on_the_model():
    with nicoll.Cluster(nodes=64, backend="model") as cl:
        assert [cl.device(r).node_id for r in range(64)] == list(range(64))


def test_build_defaults_per_backend():
    """A cluster that names no build options gets what builds quickly on its backend: the model
    every ALU pair, the simulators sum on float32; max_nodes 8, or the node count if larger."""
    from nicoll.config import DEFAULT_SIM_ALU_CAPABILITIES, build_defaults
    assert build_defaults("model", 4, None, None) == (8, None)
    assert build_defaults("verilator", 4, None, None) == (8, DEFAULT_SIM_ALU_CAPABILITIES)
    assert build_defaults("amaranth", 16, None, None) == (16, DEFAULT_SIM_ALU_CAPABILITIES)
    assert build_defaults("verilator", 4, 64, "all") == (64, None)
    pairs = [("max", "int32")]
    assert build_defaults("verilator", 4, None, pairs) == (8, pairs)
    with pytest.raises(NicollError, match=r"alu_capabilities must be \(op, dtype\) pairs, 'all' "
                                          r"or None, not 'every'"):
        build_defaults("model", 4, None, "every")


def test_model_default_build_computes_every_pair_and_refusals_name_the_option():
    with nicoll.Cluster(nodes=2) as cl:
        assert cl.device(0).max_nodes == 8
        ys = cl.allreduce([np.arange(4, dtype=np.float64)] * 2, "prod")
        assert list(ys[0]) == [0.0, 1.0, 4.0, 9.0]
    with nicoll.Cluster(nodes=2, alu_capabilities=[("sum", "float32")]) as cl:
        with pytest.raises(NicollError, match=r"op 'max' on int32 is not in this build's ALU, "
                                              r"which computes \('sum', 'float32'\); open the "
                                              r"cluster with alu_capabilities=\[\.\.\., "
                                              r"\('max', 'int32'\)\]"):
            cl.allreduce([np.arange(4, dtype=np.int32)] * 2, "max")


def test_cluster_make_options_follow_nicoll_sim_opt(monkeypatch):
    from nicoll.sim.verilator_build import CLUSTER_MAKE_OPTIONS, cluster_make_options
    monkeypatch.delenv("NICOLL_SIM_OPT", raising=False)
    assert cluster_make_options() == CLUSTER_MAKE_OPTIONS
    monkeypatch.setenv("NICOLL_SIM_OPT", "-O2")
    assert cluster_make_options() == CLUSTER_MAKE_OPTIONS.replace("OPT_FAST=-O1", "OPT_FAST=-O2")
    monkeypatch.setenv("NICOLL_SIM_OPT", "fast")
    with pytest.raises(NicollError, match=r"^NICOLL_SIM_OPT must be one of -O0, -O1, -O2, -O3, "
                                          r"not 'fast'$"):
        cluster_make_options()
